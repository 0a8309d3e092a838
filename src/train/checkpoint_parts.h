// What a checkpoint holds of a run, listed once (docs/checkpoint-format.md): one entry per group,
// with how it is written from the run's live objects and how a resume reads it back. The
// Checkpointer writes by walking the list (rank 0 every part; when the state is sharded, every
// rank the parts it holds its own share of) and read_resume_state reads by walking it, in the
// list's order. Private to the train module.
#pragma once

#include <cstdint>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/model/model.h"
#include "hpctrain/optim/loss_scaler.h"
#include "hpctrain/optim/nonfinite.h"
#include "hpctrain/sharding/gradient_update.h"
#include "hpctrain/sharding/weight_average.h"
#include "hpctrain/train/evaluator.h"
#include "hpctrain/train/resume_state.h"

namespace hpctrain::train {

// What a checkpoint's parts are written from.
struct SaveSources {
  model::Model& model;
  bool shards_parameters;  // stage 3: the model part holds the buffers, each rank adds its slices
  sharding::UpdateState& update;
  const sharding::WeightAverage* average;  // null without train.ema_decay
  const optim::SkippedSteps& skipped;
  const optim::LossScaler* loss_scaler;    // null without loss scaling
  std::int64_t step;                       // optimizer steps taken
  const BestEvaluation& best;
  const ckpt::NamedTensors& generators;      // every rank's, gathered on rank 0
  const ckpt::NamedTensors& base_checksums;  // of a LoRA model's frozen base; empty without one
};

struct CheckpointPart {
  const char* group;
  // Each rank holds its own share of this part when the state is sharded (Strategy::shards_state),
  // and writes it; otherwise rank 0 writes it whole.
  bool per_rank;
  void (*save)(const SaveSources& from, ckpt::Checkpoint& to);
  void (*load)(const ckpt::CheckpointReader& reader, const ResumeTargets& into, ResumedState& resumed);
};

// Every part, in the order a resume reads them: the LoRA base is checked before the model is read.
const std::vector<CheckpointPart>& checkpoint_parts();

}  // namespace hpctrain::train
