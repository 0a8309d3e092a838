// Mixed precision for the forward pass (train.precision=bf16|fp16): ATen's autocast for one device
// type, on for the scope's lifetime. Weights, gradients and optimizer state stay float32: autocast
// casts to bfloat16 or float16 inside the ops that profit (matmul, convolution) and keeps the rest,
// such as reductions, in float32. This file is the one place that knows how the autocast API
// differs between libtorch 1.x and >= 2.4. Depends on ATen's tensor types only.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <optional>
#include <string>

#include "hpctrain/config/config.h"

namespace hpctrain::model {

// What autocast computes in for train.precision: bfloat16 (bf16), float16 (fp16), or nothing
// (fp32: autocast stays off).
std::optional<at::ScalarType> autocast_dtype(config::Precision precision);

// What autocast computes in on `device` now; nullopt when it is off (a recomputed block's second
// forward, model/activation_checkpoint, runs as the first did).
std::optional<at::ScalarType> active_autocast(c10::DeviceType device);

class AutocastScope {
 public:
  // `dtype`: nullopt leaves autocast off (fp32).
  AutocastScope(c10::DeviceType device, std::optional<at::ScalarType> dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_;
  bool was_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
};

}  // namespace hpctrain::model
