// Rotary position embeddings (RoPE; Su et al., 2021) in Hugging Face's layout: a head's channel i
// and channel i + head_dim / 2 form a pair rotated by position x frequency i, frequencies
// theta^(-2i / head_dim), optionally rescaled as Llama 3.1 does. Private to src/model.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "hpctrain/config/decoder_config.h"

namespace hpctrain::model {

// The head_dim / 2 inverse frequencies, float32 on the CPU.
at::Tensor rotary_inverse_frequencies(std::int64_t head_dim, double theta, const config::Llama3RopeScaling& scaling);

struct RotaryAngles {
  at::Tensor cos;  // [T, head_dim] or [B, 1, T, head_dim], each frequency twice (the halves of the head)
  at::Tensor sin;
};

// The angles of positions first .. first + count - 1, computed in float32 and given in `dtype`.
RotaryAngles rotary_angles(const at::Tensor& inverse_frequencies, std::int64_t first, std::int64_t count,
                           at::ScalarType dtype, at::Device device);

// The angles of each row's own positions, `positions` [B, T] (int64): [B, 1, T, head_dim].
RotaryAngles rotary_angles(const at::Tensor& inverse_frequencies, const at::Tensor& positions, at::ScalarType dtype,
                           at::Device device);

// `x` [B, heads, T, head_dim] rotated by `angles` of its T positions.
at::Tensor rotate(const at::Tensor& x, const RotaryAngles& angles);

}  // namespace hpctrain::model
