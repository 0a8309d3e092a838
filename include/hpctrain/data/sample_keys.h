// Each sample's own key for random draws made after reading (diffusion's step, noise and dropped
// class): a hash of (train.seed, epoch, dataset index) alone, as augmentation's draws are, so a
// sample draws the same at any world size and after a resume. Evaluation's keys use the epoch
// kEvaluationEpoch, the same every time. Depends on ATen.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace hpctrain::data {

constexpr std::int64_t kEvaluationEpoch = -1;

// int64 [B] on the host, one key per index.
at::Tensor sample_keys(std::uint64_t seed, std::int64_t epoch, const std::vector<std::int64_t>& indices);

}  // namespace hpctrain::data
