#include "hpctrain/train/step_loss.h"

#include <ATen/ATen.h>

namespace hpctrain::train {

at::Tensor step_loss(const at::Tensor& per_sample, const at::Tensor& weights, int world_size,
                     std::int64_t global_real) {
  return (per_sample * weights).sum() * (static_cast<double>(world_size) / static_cast<double>(global_real));
}

}  // namespace hpctrain::train
