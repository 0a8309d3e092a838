// Activation checkpointing (model.activation_checkpointing). Private to src/model. Note
// [Recomputed blocks]: a block's forward runs without keeping its intermediate tensors for
// backward; when its output's gradient arrives, the forward runs again from the block's input,
// with the random generators and autocast as they were the first time (so dropout drops the same
// elements and products round the same way), and the gradient is back-propagated through that
// second forward. Activations are kept for one block at a time instead of all, for one more
// forward per step. Under no_grad (evaluation, generation) the block just runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace hpctrain::model {

using BlockForward = std::function<at::Tensor(const at::Tensor&)>;

// `block(input)`, recomputed in backward. `block` is kept until then, so it must hold what it
// uses (by value), not refer to the caller's locals. Gradients reach the parameters `block` uses
// even when `input` needs none (a frozen embedding's output).
at::Tensor recomputed_in_backward(const at::Tensor& input, BlockForward block);

}  // namespace hpctrain::model
