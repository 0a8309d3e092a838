// A parameter's memory taken away and told apart: the tensor keeps its shape, dtype and device,
// its storage becomes zero bytes long (Note [Parameters without memory] in
// src/sharding/block_gatherer.cpp), so nothing may read it until memory is given back. Depends on
// ATen's tensor type.
#pragma once

#include <ATen/core/Tensor.h>

namespace hpctrain::model {

// Frees `tensor`'s storage, leaving it zero bytes long.
void release_memory(const at::Tensor& tensor);

// Whether `tensor` has elements but no memory for them (release_memory's).
bool lacks_memory(const at::Tensor& tensor);

}  // namespace hpctrain::model
