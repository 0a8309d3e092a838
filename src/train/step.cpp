// Step: one optimizer step, read top to bottom in run().
#include "hpctrain/train/step.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/core/trace.h"
#include "hpctrain/core/units.h"
#include "hpctrain/ddp/grad_sync.h"
#include "hpctrain/model/autocast.h"
#include "hpctrain/model/batch_norm.h"
#include "hpctrain/model/flops.h"
#include "hpctrain/model/parameter_memory.h"
#include "hpctrain/train/option_checks.h"
#include "hpctrain/train/step_loss.h"
#include "hpctrain/weights/model_weights.h"
#include "graphed_gradients.h"

namespace hpctrain::train {

namespace {

// dist.sync_bn: BatchNorm layers reduce their statistics over the ranks (model/batch_norm.h).
void synchronize_batch_norm(const config::Config& config, model::Model& model, comm::Communicator& comm) {
  if (!config.dist.sync_bn) return;
  model::BatchStatsReducer reduce;
  if (comm.size() > 1) {
    reduce = [c = &comm](at::Tensor& stats) { c->allreduce_blocking(stats, comm::ReduceOp::kSum); };
  }
  const int layers = model::set_batch_stats_reducer(model.module(), reduce);
  if (layers == 0) {
    const bool scripted = config.model.name == config::ModelName::kTorchscript;
    log::warn("dist.sync_bn=true, but model {} has no BatchNorm layer of hpctrain's{}; nothing to synchronize",
              config::name_of(config.model.name),
              scripted ? " (a TorchScript module's normalize over each rank's batch)" : "");
  } else {
    log::info("dist.sync_bn: {} BatchNorm layer(s) normalize over the batches of all {} rank(s)", layers,
              comm.size());
  }
}

std::optional<optim::LossScaler> loss_scaler_for(const config::TrainConfig& train) {
  if (!optim::uses_loss_scaling(train)) return std::nullopt;
  optim::LossScalerOptions scaling;
  scaling.initial_scale = train.loss_scale_init;
  return optim::LossScaler(scaling);
}

// module.to(device), a parameter without memory going there without memory too (allocated on
// the device and released, one at a time, never the whole model).
void move_to(torch::nn::Module& module, c10::Device device) {
  const torch::NoGradGuard no_grad;
  for (at::Tensor& p : module.parameters()) {
    if (!model::lacks_memory(p) || p.device() == device) continue;
    const at::Tensor moved = at::empty(p.sizes(), p.options().device(device));
    model::release_memory(moved);
    p.set_data(moved);
  }
  module.to(device);
}

}  // namespace

Step::Step(std::shared_ptr<model::Model> model, const config::Config& config, comm::Communicator& comm,
           c10::Device device)
    : model_(std::move(model)), config_(config), strategy_(config.dist), comm_(comm), device_(device),
      objective_(make_objective(config)),
      skipped_({config.train.nonfinite == config::Nonfinite::kAbort, config.train.max_skipped}) {
  // Sharded: what is made here to last (stage 1's buckets, the moving average) and the broadcast's
  // temporaries are mapped, so the heap is left to the steps' temporaries (docs/architecture.md,
  // "Allocator").
  const sys::LargeAllocationsMapped mapped(strategy_.shards_state());
  torch::nn::Module& module = model_->module();
  move_to(module, device_);
  // A parameter without memory is read from the same file by every rank (model.h, DeferredWeights).
  std::vector<at::Tensor> everything;
  for (const at::Tensor& p : module.parameters()) {
    if (!model::lacks_memory(p)) everything.push_back(p);
  }
  for (auto& b : module.buffers()) buffers_.push_back(b);
  for (const auto& b : buffers_) buffers_before_step_.push_back(b.detach().clone());
  everything.insert(everything.end(), buffers_.begin(), buffers_.end());
  ddp::broadcast_tensors(comm_, everything, 0);
  update_ = strategy_.make_update(config_, comm_, weights::trainable_parameters(module), *model_);
  synchronize_batch_norm(config_, *model_, comm_);
  loss_scaler_ = loss_scaler_for(config_.train);
  if (config_.train.ema_decay > 0) {
    average_.emplace(sharding::WeightAverage::of_update(update_->state(), *model_, config_.train.ema_decay,
                                                        strategy_.shards_state()));
  }
  if (config_.train.cuda_graphs) {
    check_cuda_graphs(config_, {device_.is_cuda(), comm_.size(), /*training=*/true});
    graphs_ = std::make_unique<GraphedGradients>(device_);
  }
  log_model();
}

Step::~Step() = default;

StepResult Step::run(const std::vector<data::Batch>& micro_batches, const StepPlan& plan) {
  model_->module().train();
  // Note [Masked mean]: every micro-batch's loss is divided by the real samples of the whole step
  // (all ranks, all micro-batches), so the accumulated, averaged gradient is the mean over the
  // step's real samples, as one process on the whole global batch would compute it.
  std::int64_t step_real = 0;
  bool full = true;
  for (const data::Batch& batch : micro_batches) {
    step_real += batch.global_real;
    full = full && batch.global_real == batch.input.size(0) * comm_.size();
  }
  StepResult result;
  result.loss_sum = torch::zeros({}, torch::dtype(torch::kFloat64).device(device_));
  sync_buffers();
  // The forward pass updates BatchNorm's running statistics; a skipped step must not, so a NaN
  // in its activations cannot reach them.
  for (size_t b = 0; b < buffers_.size(); ++b) buffers_before_step_[b].copy_(buffers_[b]);
  zero_grad();
  for (size_t j = 0; j < micro_batches.size(); ++j) {
    forward_backward(micro_batches[j], j + 1 == micro_batches.size(), step_real, full, result);
  }
  const Timer reducing;
  {
    const trace::Span span("gradient wait");
    update_->reduce_gradients();
  }
  result.comm_s = reducing.elapsed_s();
  // Averaged gradients are equal on every rank, so every rank decides alike; with loss scaling a
  // non-finite step is an overflow.
  result.finite = update_->unscale_and_check(loss_scaler());
  if (!result.finite) {
    for (size_t b = 0; b < buffers_.size(); ++b) buffers_[b].copy_(buffers_before_step_[b]);
  }
  result.action = skipped_.after_step(result.finite);
  if (result.action == optim::NonfiniteAction::kAbort) return result;  // the run stops at the last good state
  if (loss_scaler_) loss_scaler_->update(result.finite);
  const trace::Span span("optimizer");
  if (result.finite) result.grad_norm = update_->clip(config_.optim.clip_grad_norm, plan.want_grad_norm);
  update_->update(plan.lr, /*apply=*/result.finite);
  if (average_ && result.finite) average_->update();
  ++count_;
  check_replicas();
  return result;
}

void Step::with_evaluated_weights(const std::function<void()>& use) {
  if (!average_) return use();
  average_->with_averaged_weights(use, [this] { update_->state().owned_weights_changed(); });
}

void Step::forward_backward(const data::Batch& batch, bool last_micro_batch, std::int64_t step_real, bool full,
                            StepResult& result) {
  update_->begin_backward(last_micro_batch);
  // The first step runs eagerly: it counts the FLOPs and makes the libraries' handles.
  const auto compute = [this](const data::Batch& b, std::int64_t real) { return compute_gradients(b, real); };
  if (graphs_ && count_ > 0) {
    result.loss_sum += graphs_->run(batch, step_real, full, compute);
  } else {
    result.loss_sum += compute(batch, step_real);
  }
  result.samples += static_cast<double>(batch.real);
}

at::Tensor Step::compute_gradients(const data::Batch& batch, std::int64_t step_real) {
  Prediction prediction;
  at::Tensor losses;
  {
    const trace::Span span("forward");
    {
      const model::AutocastScope autocast(device_.type(), model::autocast_dtype(config_.train.precision));
      prediction = predict(batch);
    }
    losses = objective_->per_sample_loss(prediction);
  }
  const at::Tensor loss = step_loss(losses, batch.weight, comm_.size(), step_real);
  {
    const trace::Span span("backward");
    (loss_scaler_ ? loss * loss_scaler_->scale() : loss).backward();
  }
  return (losses.detach() * batch.weight).sum();
}

std::int64_t Step::cuda_graph_replays() const { return graphs_ ? graphs_->replays() : 0; }

// A graph accumulates into the gradients it captured, so with one they are zeroed where they are.
void Step::zero_grad() {
  if (!graphs_) return update_->zero_grad();
  std::vector<at::Tensor> gradients;
  for (const auto& p : model_->module().parameters()) {
    if (p.grad().defined()) gradients.push_back(p.grad());
  }
  if (!gradients.empty()) at::_foreach_zero_(gradients);
}

// The first forward of this process is counted (model/flops.h) for the metrics' model_tflops and
// mfu: the FLOPs of the very path training takes (train mode, gradients, autocast), per row.
Prediction Step::predict(const data::Batch& batch) {
  if (flops_counted_) return objective_->predict(*model_, batch);
  flops_counted_ = true;
  Prediction prediction;
  const double flops = model::count_flops([&] { prediction = objective_->predict(*model_, batch); });
  if (flops > 0) {
    training_flops_ = model::training_flops_per_sample(flops / static_cast<double>(batch.input.size(0)));
  }
  return prediction;
}

// Note [Buffers follow rank 0]: BatchNorm running statistics are not gradients; each rank's would
// drift with its own batches. As in PyTorch DDP they are overwritten with rank 0's before every
// forward, and again before evaluation and checkpoints, so every replica holds the same model.
void Step::sync_buffers() {
  if (!buffers_.empty() && comm_.size() > 1) ddp::broadcast_tensors(comm_, buffers_, 0);
}

// dist.check_replicas_every: every replica must hold rank 0's parameters, bit for bit (at stage 3,
// as gathered).
void Step::check_replicas() {
  const std::int64_t every = config_.dist.check_replicas_every;
  if (every == 0 || count_ % every != 0) return;
  std::vector<int> differ;
  update_->state().with_whole_parameters(
      [&] { differ = ddp::ranks_differing_from_root(comm_, model_->module().parameters(), device_); });
  if (differ.empty()) return;
  std::string ranks;
  for (const int r : differ) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  throw Error("parameters of rank(s) " + ranks + " differ from rank 0's after step " + std::to_string(count_) +
              " (dist.check_replicas_every=" + std::to_string(every) +
              "): a rank-dependent code path or a nondeterministic reduction; rerun with "
              "--dist.check_replicas_every=1 to find the first step");
}

std::string Step::describe_nonfinite(const at::Tensor& rank_loss) {
  std::vector<double> loss_not_finite(static_cast<size_t>(comm_.size()), 0.0);
  loss_not_finite[static_cast<size_t>(comm_.rank())] = std::isfinite(rank_loss.item<double>()) ? 0.0 : 1.0;
  loss_not_finite = ddp::sum_over_ranks(comm_, loss_not_finite, device_);
  std::string ranks;
  for (size_t r = 0; r < loss_not_finite.size(); ++r) {
    if (loss_not_finite[r] > 0) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  }
  const std::string first = update_->first_nonfinite_gradient();
  const std::string tensor = first.empty() ? "a parameter" : "'" + first + "'";
  return "the averaged gradient of " + tensor + " holds inf or NaN (" +
         (ranks.empty() ? std::string("every rank's loss was finite: the backward pass overflowed")
                        : "the loss was not finite on rank(s) " + ranks) +
         ")";
}

void Step::log_model() const {
  torch::nn::Module& module = model_->module();
  std::int64_t count = 0;
  std::int64_t tensors = 0;
  std::int64_t frozen_count = 0;
  for (const auto& p : module.parameters()) {
    if (!p.requires_grad()) {
      frozen_count += p.numel();
      continue;
    }
    count += p.numel();
    ++tensors;
  }
  const auto frozen = static_cast<std::int64_t>(module.parameters().size()) - tensors;
  const double trained_percent =
      100.0 * static_cast<double>(count) / static_cast<double>(std::max<std::int64_t>(count + frozen_count, 1));
  // On a GPU, say which float32 math runs (train.tf32), since it changes results slightly.
  const std::string math = !device_.is_cuda()      ? ""
                           : config_.train.tf32 ? " (float32 products on TF32 tensor cores: train.tf32)"
                                                : " (full float32: train.tf32=false)";
  log::info("model {}: {} parameters in {} tensors{}, {} buffers; device {}{}, backend {}, {} rank(s)",
            config::name_of(config_.model.name), count, tensors,
            frozen > 0 ? fmt::format(" ({} frozen tensors besides, of {} parameters: {:.2f}% train)", frozen,
                                     frozen_count, trained_percent)
                       : "",
            buffers_.size(), device_.str(),
            math, comm_.backend(), comm_.size());
  for (const auto& tied : model_->tied_parameters()) {
    log::info("tied weights: '{}' is '{}' (trained once, stored under both names)", tied.name, tied.same_as);
  }
  const observe::HeldBytes held = update_->state().held_bytes();
  log::info("rank {} holds {} of parameters, {} of gradients and {} of optimizer state ({}{})", comm_.rank(),
            bytes_text(held.parameters), bytes_text(held.gradients), bytes_text(held.optimizer_state),
            strategy_.option(), strategy_.shards_state() ? fmt::format(", its share of {} rank(s)", comm_.size()) : "");
  if (average_) {
    log::info("keeping a moving average of the trained weights (train.ema_decay={}): {} more{}, used by "
              "evaluation and kept in checkpoints",
              config_.train.ema_decay, bytes_text(average_->bytes()),
              strategy_.shards_state() ? " (this rank's share)" : "");
  }
}

}  // namespace hpctrain::train
