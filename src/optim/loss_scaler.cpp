#include "hpctrain/optim/loss_scaler.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "hpctrain/core/error.h"
#include "hpctrain/optim/nonfinite.h"

namespace hpctrain::optim {

bool uses_loss_scaling(const config::TrainConfig& train) {
  return train.loss_scale == config::LossScale::kDynamic ||
         (train.loss_scale == config::LossScale::kAuto && train.precision == config::Precision::kFp16);
}

LossScaler::LossScaler(LossScalerOptions options) : options_(options), scale_(options.initial_scale) {}

bool LossScaler::unscale(const std::vector<at::Tensor>& gradients) const {
  return scale_and_check(gradients, 1.0 / scale_);
}

void LossScaler::update(bool finite) {
  if (!finite) {
    scale_ *= options_.backoff_factor;
    good_steps_ = 0;
    return;
  }
  if (++good_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
}

ckpt::NamedTensors LossScaler::state() const {
  return {{"scale", at::full({}, scale_, at::kDouble)},
          {"good_steps", at::full({}, good_steps_, at::kLong)}};
}

void LossScaler::load_state(const ckpt::NamedTensors& stored) {
  bool have_scale = false;
  for (const auto& [name, value] : stored) {
    if (name == "scale") {
      scale_ = ckpt::stored_double(value, "loss scaler entry '" + name + "'");
      have_scale = true;
    } else if (name == "good_steps") {
      good_steps_ = ckpt::stored_count(value, "loss scaler entry '" + name + "'");
    }
  }
  if (!have_scale || !std::isfinite(scale_) || scale_ <= 0) {
    throw CheckpointError("the checkpoint's loss scaler has no positive finite scale");
  }
}

}  // namespace hpctrain::optim
