#include "hpctrain/optim/nonfinite.h"

#include <ATen/ATen.h>

namespace hpctrain::optim {

namespace {

// Whether `gradient` holds an inf or a NaN, as a 0-dim bool tensor on its device: its minimum
// and maximum, in one pass without a temporary the size of the gradient, are finite exactly when
// every element is (NaN propagates through both; an inf is one of them).
at::Tensor holds_nonfinite(const at::Tensor& gradient) {
  if (gradient.numel() == 0) return at::zeros({}, gradient.options().dtype(at::kBool));
  if (gradient.scalar_type() != at::kFloat && gradient.scalar_type() != at::kDouble) {
    return gradient.isfinite().logical_not().any();  // 16-bit: small, and aminmax may not take it
  }
  const auto [lowest, highest] = at::aminmax(gradient);
  return lowest.isfinite().logical_and(highest.isfinite()).logical_not();
}

}  // namespace

bool all_finite(const std::vector<at::Tensor>& gradients) { return scale_and_check(gradients, 1.0); }

bool scale_and_check(const std::vector<at::Tensor>& gradients, double factor) {
  std::vector<at::Tensor> defined;
  for (const at::Tensor& gradient : gradients) {
    if (gradient.defined()) defined.push_back(gradient);
  }
  if (defined.empty()) return true;
  if (defined.front().is_cuda()) {
    // One launch for every tensor (the loop below makes a few per tensor, which a small model on
    // a GPU pays for). CUDA only in libtorch 1.13.
    at::Tensor found_inf = at::zeros({1}, defined.front().options().dtype(at::kFloat));
    const at::Tensor inv_scale = at::full({1}, factor, found_inf.options());
    at::_amp_foreach_non_finite_check_and_unscale_(defined, found_inf, inv_scale);
    return found_inf.item<float>() == 0.0f;
  }
  at::Tensor any_bad;  // one item() at the end
  for (const at::Tensor& gradient : defined) {
    if (factor != 1.0) gradient.mul_(factor);
    const at::Tensor bad = holds_nonfinite(gradient);
    any_bad = any_bad.defined() ? any_bad.logical_or(bad) : bad;
  }
  return !any_bad.item<bool>();
}

std::int64_t first_nonfinite(const std::vector<at::Tensor>& gradients) {
  for (size_t i = 0; i < gradients.size(); ++i) {
    if (gradients[i].defined() && holds_nonfinite(gradients[i]).item<bool>()) return static_cast<std::int64_t>(i);
  }
  return -1;
}

SkippedSteps::SkippedSteps(NonfinitePolicy policy) : policy_(policy) {}

NonfiniteAction SkippedSteps::after_step(bool finite) {
  if (finite) {
    in_a_row_ = 0;
    return NonfiniteAction::kApply;
  }
  if (policy_.abort_at_once || in_a_row_ + 1 > policy_.max_in_a_row) return NonfiniteAction::kAbort;
  ++in_a_row_;
  ++total_;
  return NonfiniteAction::kSkip;
}

ckpt::NamedTensors SkippedSteps::state() const {
  return {{"skipped_steps", at::full({}, total_, at::kLong)}, {"skipped_in_a_row", at::full({}, in_a_row_, at::kLong)}};
}

void SkippedSteps::load_state(const ckpt::NamedTensors& stored) {
  for (const auto& [name, value] : stored) {
    if (name == "skipped_steps") total_ = ckpt::stored_count(value, "the count " + name);
    if (name == "skipped_in_a_row") in_a_row_ = ckpt::stored_count(value, "the count " + name);
  }
}

}  // namespace hpctrain::optim
