// A model's arithmetic, for model FLOP/s and MFU: the floating-point operations of a forward pass,
// counted from the shapes of the matrix products, convolutions and attention it actually runs, so
// a TorchScript module is counted like a built-in one. Depends on ATen.
#pragma once

#include <functional>

namespace hpctrain::model {

// 2 x the multiply-adds of the matrix products (mm, addmm, bmm, baddbmm) and convolutions (of any
// dimension, transposed too) that `run` executes on this thread; elementwise work, norms and
// softmax are left out, as model-FLOP counts leave them out. An op counted is not counted again
// inside another (matmul's mm, conv2d's convolution). Scaled dot-product attention counts its two
// products (2 x B x heads x L x S x (E + Ev)), fused or not, causal or not.
double count_flops(const std::function<void()>& run);

// Training FLOPs per sample: forward + backward, the backward counted as twice the forward (two
// products per product: the gradients of inputs and of weights), the convention of model-FLOP
// utilization (PaLM, appendix B).
inline double training_flops_per_sample(double forward_flops) { return 3.0 * forward_flops; }

}  // namespace hpctrain::model
