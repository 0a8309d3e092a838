// AdamW whose update runs as a few multi-tensor kernels over all parameters instead of about ten
// kernels per parameter (optim.fused): libtorch's fused AdamW kernel where this libtorch has one
// for the device (2.1 on GPUs, 2.4 on CPUs), else its _foreach_ operations, which compute what
// torch::optim::AdamW computes in the same order. The state is torch::optim::AdamW's own
// (AdamWParamState per parameter), so checkpoints, resumes and sharded optimizers see no
// difference. AMSGrad is left to torch::optim::AdamW. Depends on torch's optimizers.
#pragma once

#include <torch/optim/adamw.h>

#include <vector>

namespace hpctrain::train {

// How a MultiTensorAdamW updates tensors of one device and type.
enum class MultiTensorKernel { kFused, kForeach };

class MultiTensorAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  at::Tensor step(LossClosure closure = nullptr) override;

  // The kernel step() uses for parameters on `device`; kForeach can be forced for tests.
  static MultiTensorKernel kernel_for(const c10::Device& device);
  void force_kernel(MultiTensorKernel kernel) { forced_ = kernel; forced_set_ = true; }

 private:
  // The parameters of one group that step together: same device, type and step count.
  struct Batch {
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::int64_t step = 0;  // after this update
  };
  std::vector<Batch> batches_of(torch::optim::OptimizerParamGroup& group);
  void update(Batch& batch, const torch::optim::AdamWOptions& options) const;

  MultiTensorKernel forced_ = MultiTensorKernel::kForeach;
  bool forced_set_ = false;
};

}  // namespace hpctrain::train
