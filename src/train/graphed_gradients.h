// train.cuda_graphs (Note [CUDA graphs] in graphed_gradients.cpp): a micro-batch's forward and
// backward captured once as a CUDA graph and replayed for every later micro-batch of the same
// shape, so the GPU no longer waits for the host to launch hundreds of small kernels. The loss
// and gradients land where the eager step puts them; the update after it stays eager. Private to
// the train module.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "hpctrain/config/config.h"
#include "hpctrain/data/split.h"
#include "hpctrain/train/cuda_graph.h"

namespace hpctrain::train {

class GraphedGradients {
 public:
  // A micro-batch's forward and backward: accumulates its gradients and returns its weighted loss
  // sum (a 0-dim tensor on the device). `step_real`: the real samples of the whole step.
  using Compute = std::function<at::Tensor(const data::Batch& batch, std::int64_t step_real)>;

  explicit GraphedGradients(c10::Device device) : device_(device) {}

  // `compute` for `batch`: replayed when a graph of a batch of this shape and `step_real` exists;
  // captured when none does yet and `full` (no padding anywhere in the step, so the graph fits
  // the steps that follow; the capture follows one real run of `compute`); else eager.
  at::Tensor run(const data::Batch& batch, std::int64_t step_real, bool full, const Compute& compute);
  std::int64_t replays() const { return replays_; }

 private:
  bool fits(const data::Batch& batch, std::int64_t step_real) const;
  void capture(const data::Batch& batch, std::int64_t step_real, const Compute& compute);

  c10::Device device_;
  std::unique_ptr<CapturedWork> graph_;
  data::Batch static_batch_;  // what the graph reads: each replay's batch is copied in first
  std::int64_t step_real_ = 0;
  at::Tensor loss_sum_;       // what the graph writes
  std::int64_t replays_ = 0;
  bool told_eager_ = false;
};

}  // namespace hpctrain::train
