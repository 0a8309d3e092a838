// AdamW whose update runs as a few multi-tensor kernels over all parameters instead of about ten
// kernels per parameter (optim.fused): on a GPU libtorch's fused AdamW kernel (libtorch 2.1 on),
// else its _foreach_ operations, which compute what torch::optim::AdamW computes in the same
// order, in chunks of at most 64 MiB so that their temporaries stay small. The state is
// torch::optim::AdamW's own (AdamWParamState per parameter), so checkpoints, resumes and sharded
// optimizers see no difference. AMSGrad is left to torch::optim::AdamW. Depends on torch's
// optimizers.
#pragma once

#include <torch/optim/adamw.h>

#include <optional>
#include <vector>

namespace hpctrain::optim {

// How a MultiTensorAdamW updates tensors of one device and type.
enum class MultiTensorKernel { kFused, kForeach };

class MultiTensorAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  at::Tensor step(LossClosure closure = nullptr) override;

  // The kernel step() uses for parameters on `device`; kForeach can be forced for tests.
  static MultiTensorKernel kernel_for(const c10::Device& device);
  void force_kernel(MultiTensorKernel kernel) { forced_ = kernel; }
  // Elements per chunk of the foreach operations (16 Mi, 64 MiB of float32); smaller for tests.
  void set_chunk_elements(std::int64_t elements) { chunk_elements_ = elements; }

 private:
  // The parameters of one group that step together: same device, type and step count.
  struct Batch {
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::int64_t step = 0;  // after this update
  };
  std::vector<Batch> batches_of(torch::optim::OptimizerParamGroup& group);
  void update(const Batch& batch, const torch::optim::AdamWOptions& options) const;
  static void update_fused(const Batch& batch, const torch::optim::AdamWOptions& options);
  static void update_foreach(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                             at::TensorList exp_avg_sqs, std::int64_t step,
                             const torch::optim::AdamWOptions& options);

  std::optional<MultiTensorKernel> forced_;
  std::int64_t chunk_elements_ = std::int64_t{16} << 20;
};

}  // namespace hpctrain::optim
