// One optimizer step of one rank, from finished micro-batches to updated parameters
// (docs/architecture.md, "One training step"): BatchNorm buffers follow rank 0's; each
// micro-batch's forward (under autocast) and per-sample loss (train.objective: objective.h), its
// masked mean and backward, with the gradient
// reduction starting in buckets during the last backward; then the reduction's end, the
// finiteness agreement (a loss scaler's unscale), clipping, the learning rate and the optimizer
// update, the moving average of the weights, and a replica check when due. How gradients become
// the update is a GradientUpdate (gradient_update.h), so a sharded optimizer changes that and not
// this. Depends on comm, data (Batch), model, optim, sharding and this module's objective.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/config/config.h"
#include "hpctrain/data/split.h"
#include "hpctrain/model/model.h"
#include "hpctrain/optim/loss_scaler.h"
#include "hpctrain/optim/nonfinite.h"
#include "hpctrain/sharding/gradient_update.h"
#include "hpctrain/sharding/strategy.h"
#include "hpctrain/sharding/weight_average.h"
#include "hpctrain/train/objective.h"

namespace hpctrain::comm {
class Communicator;
}  // namespace hpctrain::comm

namespace hpctrain::train {

class GraphedGradients;

// What the loop tells a step.
struct StepPlan {
  double lr = 0.0;              // the schedule's learning rate for this step
  bool want_grad_norm = false;  // compute the gradients' norm even without clipping (a record follows)
};

// What happened in a step.
struct StepResult {
  at::Tensor loss_sum;           // this rank's weighted loss sum, float64 on the device (inf or NaN possible)
  double samples = 0.0;          // this rank's real samples
  bool finite = true;            // the averaged gradients held no inf or NaN
  optim::NonfiniteAction action = optim::NonfiniteAction::kApply;  // kAbort: nothing was applied or counted
  std::optional<double> grad_norm;  // before clipping, when computed (finite steps only)
  double comm_s = 0.0;              // waiting for the gradient reduction after backward
};

class Step {
 public:
  // Moves the model to `device`, gives every rank rank 0's parameters and buffers, and builds the
  // update over the parameters that learn, the loss scaler and the non-finite policy. Collective.
  Step(std::shared_ptr<model::Model> model, const config::Config& config, comm::Communicator& comm,
       c10::Device device);
  ~Step();
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

  // Collective: one optimizer step over `micro_batches` (finished, as Source::finish makes them).
  StepResult run(const std::vector<data::Batch>& micro_batches, const StepPlan& plan);

  // Optimizer steps taken, skipped ones included; set by a resume.
  std::int64_t count() const { return count_; }
  void set_count(std::int64_t steps) { count_ = steps; }

  // Collective: BatchNorm buffers overwritten with rank 0's (Note [Buffers follow rank 0]).
  void sync_buffers();
  // Collective, after a step that was not finite: "the averaged gradient of 'fc1.weight' holds inf
  // or NaN (the loss was not finite on rank(s) 1)"; `rank_loss` is the step's StepResult::loss_sum.
  std::string describe_nonfinite(const at::Tensor& rank_loss);

  model::Model& model() { return *model_; }
  // What the update keeps between steps: for the checkpoint, the resume and reports.
  sharding::UpdateState& update_state() { return update_->state(); }
  // How the ranks share the training state (dist.zero_stage), which decides what this rank holds.
  const sharding::Strategy& strategy() const { return strategy_; }
  // What this rank holds for training.
  observe::HeldBytes held_bytes() const { return update_->state().held_bytes(); }
  optim::SkippedSteps& skipped() { return skipped_; }
  // The moving average of the weights (train.ema_decay); null without one.
  sharding::WeightAverage* average() { return average_ ? &*average_ : nullptr; }
  // Collective: runs `use` (an evaluation) with the weights a run is for: the moving average when
  // there is one, lent to the parameters for the call, else the trained weights.
  void with_evaluated_weights(const std::function<void()>& use);
  optim::LossScaler* loss_scaler() { return loss_scaler_ ? &*loss_scaler_ : nullptr; }
  // The FLOPs of training one sample (or window), counted in this process's first forward; none
  // when that forward ran no product or convolution, or before it.
  std::optional<double> training_flops() const { return training_flops_; }
  // Micro-batches whose forward and backward were replayed from a CUDA graph (train.cuda_graphs).
  std::int64_t cuda_graph_replays() const;

 private:
  // `full`: no micro-batch of the step holds padding on any rank.
  void forward_backward(const data::Batch& batch, bool last_micro_batch, std::int64_t step_real, bool full,
                        StepResult& result);
  // The micro-batch's forward and backward; returns its weighted loss sum.
  at::Tensor compute_gradients(const data::Batch& batch, std::int64_t step_real);
  void zero_grad();
  Prediction predict(const data::Batch& batch);
  void check_replicas();
  void log_model() const;

  std::shared_ptr<model::Model> model_;
  const config::Config config_;
  const sharding::Strategy strategy_;
  comm::Communicator& comm_;
  c10::Device device_;
  std::vector<at::Tensor> buffers_;
  std::vector<at::Tensor> buffers_before_step_;  // restored when a step is skipped
  std::unique_ptr<Objective> objective_;
  std::unique_ptr<sharding::GradientUpdate> update_;
  std::optional<optim::LossScaler> loss_scaler_;
  std::optional<sharding::WeightAverage> average_;
  std::unique_ptr<GraphedGradients> graphs_;  // train.cuda_graphs
  optim::SkippedSteps skipped_;
  std::int64_t count_ = 0;
  bool flops_counted_ = false;
  std::optional<double> training_flops_;
};

}  // namespace hpctrain::train
