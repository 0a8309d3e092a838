// The loss one rank back-propagates for one step. Note [Masked mean]: GradSync averages gradients
// over ranks, so each rank's loss is the sum over its real samples (weight 1; padding has weight 0)
// scaled by world_size / (real samples in the whole step). The average over ranks is then the mean
// over every real sample of the step, whatever the world size and however the padding fell.
// Depends on ATen only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace hpctrain::train {

// `per_sample`: unreduced losses [B]; `weights`: [B] of 0/1. Returns a scalar to call backward on.
at::Tensor step_loss(const at::Tensor& per_sample, const at::Tensor& weights, int world_size,
                     std::int64_t global_real);

}  // namespace hpctrain::train
