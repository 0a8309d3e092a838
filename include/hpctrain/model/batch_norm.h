// BatchNorm whose batch statistics can span every rank (dist.sync_bn), as PyTorch's
// SyncBatchNorm. The built-in models use model::BatchNorm in place of torch's BatchNorm1d/2d: with
// no reducer it is torch's batch norm, parameter and buffer names included (checkpoints are the
// same); given a reducer, training forward sums each channel's sum, sum of squares and count over
// the ranks, and backward sums the two gradient statistics the input gradient needs, so the result
// equals BatchNorm on the whole global batch. The reduction is a callback, so model stays free of
// comm. Depends on ATen's tensor type; torch::nn::Module is forward-declared.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace hpctrain::model {

// Sums a contiguous float64 tensor over all ranks, in place. Called collectively: every rank's
// BatchNorm layers call it in the same order, in forward and in backward.
using BatchStatsReducer = std::function<void(at::Tensor& stats)>;

// Hands `reduce` to every model::BatchNorm inside `module` (an empty function: local statistics
// again). Returns how many layers it reached.
int set_batch_stats_reducer(torch::nn::Module& module, const BatchStatsReducer& reduce);

}  // namespace hpctrain::model
