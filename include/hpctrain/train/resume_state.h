// What a resume reads from a checkpoint into a run's live objects: the model, the optimizer's
// state, the skipped-step counts, the loss scale, the moving average of the weights, the best
// evaluation and this rank's random generators. Every malformed entry is a CheckpointError naming
// the file and the entry, never an error of the tensor library (tests/fuzz/checkpoint_fuzz.cpp
// feeds it corrupted files).
// Depends on ckpt, model, optim's and sharding's state holders.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/model/model.h"
#include "hpctrain/optim/loss_scaler.h"
#include "hpctrain/optim/nonfinite.h"
#include "hpctrain/sharding/weight_average.h"

namespace hpctrain::train {

// The live objects a checkpoint is read into.
struct ResumeTargets {
  model::Model& model;
  // Reads the optimizer's state from the checkpoint (GradientUpdate::load_optimizer_state).
  std::function<void(const ckpt::CheckpointReader&)> load_optimizer_state;
  optim::SkippedSteps& skipped;
  optim::LossScaler* loss_scaler = nullptr;  // null without loss scaling
  sharding::WeightAverage* average = nullptr;    // null without train.ema_decay
  c10::Device device = c10::Device(c10::kCPU);
  int rank = 0;
  int world_size = 1;
  // Where a LoRA model's base came from, for the message when it is not the checkpoint's
  // (weights::base_source); unused without adapters.
  std::string base_source{};
};

struct ResumedState {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t cursor = 0;
  std::optional<double> best_test_acc;
  std::optional<double> best_test_loss;
  // This rank's generators were restored: the checkpoint was written by as many ranks and holds
  // them. Otherwise the caller seeds new ones.
  bool generators_restored = false;
  bool loss_scale_restored = false;  // the checkpoint held one and targets.loss_scaler took it
  bool average_restored = false;     // the checkpoint held a moving average and targets.average took it
};

// Reads every part of `reader` (src/train/checkpoint_parts.h: a LoRA base checked, then the
// model, moving average, optimizer, schedule, loss scaler, metrics and generators) into
// `targets`. Throws CheckpointError, or ConfigError for a LoRA base that is not the checkpoint's.
ResumedState read_resume_state(const ckpt::CheckpointReader& reader, const ResumeTargets& targets);

}  // namespace hpctrain::train
