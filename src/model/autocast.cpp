#include "hpctrain/model/autocast.h"

#include <ATen/autocast_mode.h>

#include "hpctrain/model/torch_version.h"

namespace hpctrain::model {
namespace {

bool enabled(c10::DeviceType device) {
#if HT_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

void set_enabled(c10::DeviceType device, bool on) {
#if HT_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, on);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_cpu_enabled(on);
  }
#endif
}

at::ScalarType get_dtype(c10::DeviceType device) {
#if HT_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

void set_dtype(c10::DeviceType device, at::ScalarType dtype) {
#if HT_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

}  // namespace

std::optional<at::ScalarType> autocast_dtype(config::Precision precision) {
  switch (precision) {
    case config::Precision::kBf16: return at::kBFloat16;
    case config::Precision::kFp16: return at::kHalf;
    case config::Precision::kFp32: break;
  }
  return std::nullopt;
}

std::optional<at::ScalarType> active_autocast(c10::DeviceType device) {
  if (!enabled(device)) return std::nullopt;
  return get_dtype(device);
}

AutocastScope::AutocastScope(c10::DeviceType device, std::optional<at::ScalarType> dtype) : device_(device) {
  if (!dtype) return;
  active_ = true;
  was_enabled_ = enabled(device);
  previous_dtype_ = get_dtype(device);
  set_dtype(device, *dtype);
  set_enabled(device, true);
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  set_enabled(device_, was_enabled_);
  set_dtype(device_, previous_dtype_);
  at::autocast::clear_cache();  // the casts of this forward's weights: the optimizer changes them
}

}  // namespace hpctrain::model
