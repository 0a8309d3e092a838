// Keeps replicas identical: averages gradients across ranks after backward, and copies tensors
// (initial parameters, BatchNorm buffers) from one rank to all. This is the foundation's flat engine:
// all gradients are packed into one buffer and reduced with a single allreduce after backward.
// Bucketing and overlap with backward come with the bucketed engine (issue 4).
// Depends on core, comm and ATen; never on models or the trainer.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <vector>

namespace hpctrain::comm {
class Communicator;
}  // namespace hpctrain::comm

namespace hpctrain::ddp {

class GradSync {
 public:
  // `parameters`: the trainable tensors whose .grad() is averaged, in a fixed order that is the
  // same on every rank. All must share one floating dtype and device.
  GradSync(comm::Communicator& comm, std::vector<at::Tensor> parameters);

  // Collective: replaces every parameter's gradient by its mean over all ranks. A parameter
  // without a gradient on this rank counts as zeros (and gets a zero gradient).
  void average_gradients();

  std::int64_t numel() const { return flat_.numel(); }

 private:
  comm::Communicator& comm_;
  std::vector<at::Tensor> parameters_;
  at::Tensor flat_;  // one buffer for all gradients, reused every step
};

// Collective: every rank's `tensors` get the values of rank `root`'s (grouped by dtype into one
// message each). Shapes and order must match across ranks.
void broadcast_tensors(comm::Communicator& comm, const std::vector<at::Tensor>& tensors, int root);

// Collective: the element-wise sums of every rank's `values`, as float64, through one allreduce on
// `device` (the device the communicator carries: a CUDA device for NCCL).
std::vector<double> sum_over_ranks(comm::Communicator& comm, const std::vector<double>& values,
                                   c10::Device device);

}  // namespace hpctrain::ddp
