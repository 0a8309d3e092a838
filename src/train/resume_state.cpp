#include "hpctrain/train/resume_state.h"

#include <torch/torch.h>

#include "hpctrain/optim/train_state.h"
#include "hpctrain/train/checkpointer.h"
#include "hpctrain/weights/model_weights.h"

namespace hpctrain::train {

namespace {

// This rank's generators ("rank-<r>/cpu", ...) with the rank prefix taken off.
ckpt::NamedTensors generators_of_rank(const ckpt::CheckpointReader& reader, int rank) {
  const std::string mine = "rank-" + std::to_string(rank) + "/";
  ckpt::NamedTensors generators;
  for (const auto& [name, state] : reader.read_group(ckpt::group::kRng)) {
    if (name.rfind(mine, 0) == 0) generators.emplace_back(name.substr(mine.size()), state);
  }
  return generators;
}

}  // namespace

ResumedState read_resume_state(const ckpt::CheckpointReader& reader, const ResumeTargets& targets) {
  const ckpt::CheckpointMeta& meta = reader.meta();
  ResumedState resumed;
  resumed.step = meta.step;
  resumed.epoch = meta.epoch;
  resumed.cursor = meta.cursor;
  if (meta.step < 0 || meta.epoch < 0 || meta.cursor < 0) {
    throw CheckpointError(reader.path() + ": negative step, epoch or cursor (step " + std::to_string(meta.step) +
                          ", epoch " + std::to_string(meta.epoch) + ", cursor " + std::to_string(meta.cursor) +
                          "); the file is damaged");
  }
  reader.read_into(ckpt::group::kModel, weights::model_state(targets.model));
  if (targets.average && reader.has_group(ckpt::group::kEma)) {
    targets.average->load(reader);
    resumed.average_restored = true;
  }
  const ckpt::NamedTensors sched = reader.read_group(ckpt::group::kSched);
  const ckpt::NamedTensors scaler = reader.read_group(ckpt::group::kLossScaler);  // empty when absent
  try {
    targets.load_optimizer_state(reader);
    targets.skipped.load_state(scaler);  // older checkpoints kept the skipped steps there
    targets.skipped.load_state(sched);
    if (targets.loss_scaler && reader.has_group(ckpt::group::kLossScaler)) {
      targets.loss_scaler->load_state(scaler);
      resumed.loss_scale_restored = true;
    }
  } catch (const CheckpointError& e) {
    throw CheckpointError(reader.path() + ": " + e.what());
  }
  for (const auto& [name, value] : reader.read_group(ckpt::group::kMetrics)) {
    if (name == "best_test_acc" || name == "best_test_loss") {
      const double best = ckpt::stored_double(value, reader.path() + ": metrics/" + name);
      if (name == "best_test_acc" && !(best >= 0.0 && best <= 1.0)) {
        throw CheckpointError(reader.path() + ": metrics/best_test_acc is " + std::to_string(best) +
                              ", not an accuracy; the file is damaged");
      }
      (name == "best_test_acc" ? resumed.best_test_acc : resumed.best_test_loss) = best;
    }
  }
  const ckpt::NamedTensors generators = generators_of_rank(reader, targets.rank);
  if (meta.world_size == targets.world_size && !generators.empty()) {
    try {
      optim::restore_rng_state(targets.device, generators);
    } catch (const c10::Error& e) {
      throw CheckpointError(reader.path() + ": rng/rank-" + std::to_string(targets.rank) +
                            " is not a generator state of this libtorch: " + e.what_without_backtrace());
    }
    resumed.generators_restored = true;
  }
  return resumed;
}

}  // namespace hpctrain::train
