#include "checkpoint_parts.h"

#include <torch/torch.h>

#include <functional>
#include <string>

#include "hpctrain/core/error.h"
#include "hpctrain/optim/train_state.h"
#include "hpctrain/weights/lora_base.h"
#include "hpctrain/weights/model_weights.h"

namespace hpctrain::train {
namespace {

// A state holder's CheckpointError, with the file it came from.
void naming_the_file(const ckpt::CheckpointReader& reader, const std::function<void()>& load) {
  try {
    load();
  } catch (const CheckpointError& e) {
    throw CheckpointError(reader.path() + ": " + e.what());
  }
}

void save_base(const SaveSources& from, ckpt::Checkpoint& to) {
  if (!from.base_checksums.empty()) to.groups[ckpt::group::kBase] = from.base_checksums;
}

void load_base(const ckpt::CheckpointReader& reader, const ResumeTargets& into, ResumedState&) {
  weights::check_base(reader, into.model, into.base_source);
}

void save_model(const SaveSources& from, ckpt::Checkpoint& to) {
  // At stage 3 each rank adds its slices of the parameters (the optim part); the buffers are
  // whole everywhere.
  to.groups[ckpt::group::kModel] =
      from.shards_parameters ? weights::model_buffers(from.model) : weights::model_state(from.model);
}

void load_model(const ckpt::CheckpointReader& reader, const ResumeTargets& into, ResumedState&) {
  reader.read_into(ckpt::group::kModel, weights::model_state(into.model));
}

void save_average(const SaveSources& from, ckpt::Checkpoint& to) {
  if (from.average) from.average->add_to(to);
}

void load_average(const ckpt::CheckpointReader& reader, const ResumeTargets& into, ResumedState& resumed) {
  if (!into.average || !reader.has_group(ckpt::group::kEma)) return;
  into.average->load(reader);
  resumed.average_restored = true;
}

void save_optimizer(const SaveSources& from, ckpt::Checkpoint& to) { from.update.add_state(to); }

void load_optimizer(const ckpt::CheckpointReader& reader, const ResumeTargets& into, ResumedState&) {
  naming_the_file(reader, [&] { into.load_optimizer_state(reader); });
}

void save_schedule(const SaveSources& from, ckpt::Checkpoint& to) {
  ckpt::NamedTensors& sched = to.groups[ckpt::group::kSched];
  sched = {{"step", torch::full({}, from.step, torch::kLong)}};
  for (auto& entry : from.skipped.state()) sched.push_back(std::move(entry));
}

void load_schedule(const ckpt::CheckpointReader& reader, const ResumeTargets& into, ResumedState&) {
  const ckpt::NamedTensors sched = reader.read_group(ckpt::group::kSched);
  const ckpt::NamedTensors scaler = reader.read_group(ckpt::group::kLossScaler);  // empty when absent
  naming_the_file(reader, [&] {
    into.skipped.load_state(scaler);  // older checkpoints kept the skipped steps there
    into.skipped.load_state(sched);
  });
}

void save_loss_scaler(const SaveSources& from, ckpt::Checkpoint& to) {
  if (from.loss_scaler) to.groups[ckpt::group::kLossScaler] = from.loss_scaler->state();
}

void load_loss_scaler(const ckpt::CheckpointReader& reader, const ResumeTargets& into, ResumedState& resumed) {
  if (!into.loss_scaler || !reader.has_group(ckpt::group::kLossScaler)) return;
  const ckpt::NamedTensors scaler = reader.read_group(ckpt::group::kLossScaler);
  naming_the_file(reader, [&] { into.loss_scaler->load_state(scaler); });
  resumed.loss_scale_restored = true;
}

void save_metrics(const SaveSources& from, ckpt::Checkpoint& to) {
  ckpt::NamedTensors bests;
  if (from.best.test_acc) bests.emplace_back("best_test_acc", torch::full({}, *from.best.test_acc, torch::kDouble));
  if (from.best.test_loss) bests.emplace_back("best_test_loss", torch::full({}, *from.best.test_loss, torch::kDouble));
  if (!bests.empty()) to.groups[ckpt::group::kMetrics] = std::move(bests);
}

void load_metrics(const ckpt::CheckpointReader& reader, const ResumeTargets&, ResumedState& resumed) {
  for (const auto& [name, value] : reader.read_group(ckpt::group::kMetrics)) {
    if (name != "best_test_acc" && name != "best_test_loss") continue;
    const double best = ckpt::stored_double(value, reader.path() + ": metrics/" + name);
    if (name == "best_test_acc" && !(best >= 0.0 && best <= 1.0)) {
      throw CheckpointError(reader.path() + ": metrics/best_test_acc is " + std::to_string(best) +
                            ", not an accuracy; the file is damaged");
    }
    (name == "best_test_acc" ? resumed.best_test_acc : resumed.best_test_loss) = best;
  }
}

void save_generators(const SaveSources& from, ckpt::Checkpoint& to) {
  to.groups[ckpt::group::kRng] = from.generators;
}

// This rank's generators ("rank-<r>/cpu", ...), with the rank prefix taken off, when the
// checkpoint was written by as many ranks; otherwise the caller seeds new ones.
void load_generators(const ckpt::CheckpointReader& reader, const ResumeTargets& into, ResumedState& resumed) {
  const std::string mine = "rank-" + std::to_string(into.rank) + "/";
  ckpt::NamedTensors generators;
  for (const auto& [name, state] : reader.read_group(ckpt::group::kRng)) {
    if (name.rfind(mine, 0) == 0) generators.emplace_back(name.substr(mine.size()), state);
  }
  if (reader.meta().world_size != into.world_size || generators.empty()) return;
  try {
    optim::restore_rng_state(into.device, generators);
  } catch (const c10::Error& e) {
    throw CheckpointError(reader.path() + ": rng/rank-" + std::to_string(into.rank) +
                          " is not a generator state of this libtorch: " + e.what_without_backtrace());
  }
  resumed.generators_restored = true;
}

}  // namespace

const std::vector<CheckpointPart>& checkpoint_parts() {
  static const std::vector<CheckpointPart> parts = {
      {ckpt::group::kBase, false, save_base, load_base},
      {ckpt::group::kModel, false, save_model, load_model},
      {ckpt::group::kEma, true, save_average, load_average},
      {ckpt::group::kOptim, true, save_optimizer, load_optimizer},
      {ckpt::group::kSched, false, save_schedule, load_schedule},
      {ckpt::group::kLossScaler, false, save_loss_scaler, load_loss_scaler},
      {ckpt::group::kMetrics, false, save_metrics, load_metrics},
      {ckpt::group::kRng, false, save_generators, load_generators},
  };
  return parts;
}

}  // namespace hpctrain::train
