#include "hpctrain/train/step_loss.h"

#include <ATen/ATen.h>

namespace hpctrain::train {

at::Tensor per_sample_loss(const at::Tensor& logits, const at::Tensor& target, double label_smoothing) {
  const at::Tensor scores = logits.to(at::kFloat);
  if (scores.dim() == 3) {
    return at::cross_entropy_loss(scores.flatten(0, 1), target.flatten(), {}, at::Reduction::None, -100,
                                  label_smoothing)
        .view(target.sizes())
        .mean(1);
  }
  return at::cross_entropy_loss(scores, target, {}, at::Reduction::None, -100, label_smoothing);
}

at::Tensor step_loss(const at::Tensor& per_sample, const at::Tensor& weights, int world_size,
                     std::int64_t global_real) {
  return (per_sample * weights).sum() * (static_cast<double>(world_size) / static_cast<double>(global_real));
}

}  // namespace hpctrain::train
