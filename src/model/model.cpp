// Model's calls into its block hooks (model.h): a forward without hooks runs as it reads; and the
// default predict_noise of the models that are not denoisers.
#include "hpctrain/model/model.h"

#include "hpctrain/core/error.h"

namespace hpctrain::model {

at::Tensor Model::predict_noise(const at::Tensor& /*noisy*/, const at::Tensor& /*steps*/, const at::Tensor& /*labels*/) {
  throw Error("internal: predict_noise called on a model that is not a denoiser (model.name=unet)");
}

void Model::begin_forward() {
  if (hooks_ != nullptr) hooks_->begin_forward();
}

at::Tensor Model::run_block(std::size_t block, const std::function<at::Tensor()>& forward) {
  if (hooks_ == nullptr) return forward();
  hooks_->before_block(block);
  at::Tensor output = forward();
  hooks_->after_block(block, output);
  return output;
}

at::Tensor Model::end_forward(at::Tensor output) {
  if (hooks_ != nullptr) hooks_->end_forward();
  return output;
}

}  // namespace hpctrain::model
