// train.nonfinite and train.max_skipped: what a step whose averaged gradients hold an inf or a NaN
// does. The check runs after the allreduce, on gradients that are equal on every rank bit for bit,
// and an inf or NaN on any one rank makes the average inf or NaN on all of them: every rank
// decides alike without a collective of its own, and replicas never diverge. Depends on ATen and
// ckpt (for the checkpoint's NamedTensors).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"

namespace hpctrain::optim {

// True when no element of the defined `gradients` is inf or NaN. One device-to-host copy.
bool all_finite(const std::vector<at::Tensor>& gradients);
// Multiplies every defined gradient by `factor` in place (skipped when it is 1), then all_finite;
// on CUDA both in GradScaler's fused kernel.
bool scale_and_check(const std::vector<at::Tensor>& gradients, double factor);

// The index of the first of `gradients` holding an inf or NaN, or -1. For messages: one copy per
// tensor checked.
std::int64_t first_nonfinite(const std::vector<at::Tensor>& gradients);

enum class NonfiniteAction { kApply, kSkip, kAbort };

struct NonfinitePolicy {
  bool abort_at_once = false;      // train.nonfinite=abort
  std::int64_t max_in_a_row = 20;  // train.max_skipped
};

// Counts skipped steps and decides each step's fate.
class SkippedSteps {
 public:
  explicit SkippedSteps(NonfinitePolicy policy);

  // After each step's check: kApply a finite step; kSkip a non-finite one (counted); kAbort at
  // once with abort_at_once, or when more than max_in_a_row steps in a row would be skipped.
  NonfiniteAction after_step(bool finite);
  std::int64_t total() const { return total_; }
  std::int64_t in_a_row() const { return in_a_row_; }

  // {"skipped_steps", "skipped_in_a_row"}, for the checkpoint's /sched group, and back (absent
  // entries read as 0: a checkpoint written before they were kept).
  ckpt::NamedTensors state() const;
  void load_state(const ckpt::NamedTensors& stored);

 private:
  NonfinitePolicy policy_;
  std::int64_t total_ = 0;
  std::int64_t in_a_row_ = 0;
};

}  // namespace hpctrain::optim
