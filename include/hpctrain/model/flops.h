// A model's arithmetic, for model FLOP/s and MFU: the floating-point operations of one forward
// pass, counted from the shapes of the matrix products and convolutions it actually runs, so a
// TorchScript module is counted like a built-in one. Depends on core and ATen.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>

#include "hpctrain/model/model.h"

namespace hpctrain::model {

// 2 x the multiply-adds of the matrix products (mm, addmm, bmm, baddbmm) and convolutions (of any
// dimension, transposed too) that `run` executes on this thread; elementwise work, norms and
// softmax are left out, as model-FLOP counts leave them out. An op counted is not counted again
// inside another (matmul's mm, conv2d's convolution). Fused attention kernels are not counted.
double count_flops(const std::function<void()>& run);

// Forward FLOPs of `model` per sample (for a language model: per window of T tokens), counted on
// `input`, a batch in the model's input format; in eval mode and without gradients, so buffers,
// generators and the mode are as they were.
double forward_flops_per_sample(Model& model, const at::Tensor& input);

// Training FLOPs per sample: forward + backward, the backward counted as twice the forward (two
// products per product: the gradients of inputs and of weights), the convention of model-FLOP
// utilization (PaLM, appendix B).
inline double training_flops_per_sample(double forward_flops) { return 3.0 * forward_flops; }

}  // namespace hpctrain::model
