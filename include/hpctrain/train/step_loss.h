// The loss one rank back-propagates for one step. Note [Masked mean]: GradSync averages gradients
// over ranks, so each rank's loss is the sum over its real samples (weight 1; padding has weight 0)
// scaled by world_size / (real samples in the whole step). The average over ranks is then the mean
// over every real sample of the step, whatever the world size and however the padding fell.
// Depends on ATen only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace hpctrain::train {

// Cross-entropy per sample, [B], in float32: of logits [B, C] against class labels [B], or, for a
// language model, of next-token logits [B, T, V] against tokens [B, T], averaged over each
// window's T tokens (every window has T, so the mean over windows is the mean over tokens).
at::Tensor per_sample_loss(const at::Tensor& logits, const at::Tensor& target, double label_smoothing);

// `per_sample`: unreduced losses [B]; `weights`: [B] of 0/1. Returns a scalar to call backward on.
at::Tensor step_loss(const at::Tensor& per_sample, const at::Tensor& weights, int world_size,
                     std::int64_t global_real);

}  // namespace hpctrain::train
