#include "hpctrain/train/loss_scaler.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "hpctrain/core/error.h"

namespace hpctrain::train {

LossScaler::LossScaler(LossScalerOptions options) : options_(options), scale_(options.initial_scale) {}

bool LossScaler::unscale(const std::vector<at::Tensor>& gradients) const {
  std::vector<at::Tensor> defined;
  for (const at::Tensor& gradient : gradients) {
    if (gradient.defined()) defined.push_back(gradient);
  }
  if (defined.empty()) return true;
  if (defined.front().is_cuda()) {
    // GradScaler's fused kernel: one launch for every tensor (the loop below makes four per
    // tensor, which a small model on a GPU pays for). CUDA only in libtorch 1.13.
    at::Tensor found_inf = at::zeros({1}, defined.front().options().dtype(at::kFloat));
    const at::Tensor inv_scale = at::full({1}, 1.0 / scale_, found_inf.options());
    at::_amp_foreach_non_finite_check_and_unscale_(defined, found_inf, inv_scale);
    return found_inf.item<float>() == 0.0f;
  }
  at::Tensor non_finite;  // one item() at the end
  for (const at::Tensor& gradient : defined) {
    gradient.mul_(1.0 / scale_);
    const at::Tensor bad = gradient.isfinite().logical_not().any();
    non_finite = non_finite.defined() ? non_finite.logical_or(bad) : bad;
  }
  return !non_finite.item<bool>();
}

void LossScaler::update(bool finite) {
  if (!finite) {
    scale_ *= options_.backoff_factor;
    good_steps_ = 0;
    ++skipped_;
    return;
  }
  if (++good_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
}

ckpt::NamedTensors LossScaler::state() const {
  return {{"scale", at::full({}, scale_, at::kDouble)},
          {"good_steps", at::full({}, good_steps_, at::kLong)},
          {"skipped_steps", at::full({}, skipped_, at::kLong)}};
}

void LossScaler::load_state(const ckpt::NamedTensors& stored) {
  bool have_scale = false;
  for (const auto& [name, value] : stored) {
    if (value.numel() != 1) throw CheckpointError("loss scaler entry '" + name + "' is not a scalar");
    if (name == "scale") {
      scale_ = value.item<double>();
      have_scale = true;
    } else if (name == "good_steps") {
      good_steps_ = value.item<std::int64_t>();
    } else if (name == "skipped_steps") {
      skipped_ = value.item<std::int64_t>();
    }
  }
  if (!have_scale || !std::isfinite(scale_) || scale_ <= 0) {
    throw CheckpointError("the checkpoint's loss scaler has no positive finite scale");
  }
}

}  // namespace hpctrain::train
