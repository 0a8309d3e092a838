// model::BatchNorm, the layer behind include/hpctrain/model/batch_norm.h. Private to src/model.
#pragma once

#include <torch/torch.h>

#include "hpctrain/model/batch_norm.h"

namespace hpctrain::model {

class BatchNormImpl : public torch::nn::Cloneable<BatchNormImpl> {
 public:
  explicit BatchNormImpl(std::int64_t channels, double eps = 1e-5, double momentum = 0.1);
  void reset() override;
  // [B, C] or [B, C, ...]: normalized per channel.
  at::Tensor forward(const at::Tensor& input);

  std::int64_t channels;
  double eps;
  double momentum;
  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  BatchStatsReducer reduce;  // empty: statistics of this rank's batch only

 private:
  at::Tensor synchronized_forward(const at::Tensor& input);
};
TORCH_MODULE(BatchNorm);

}  // namespace hpctrain::model
