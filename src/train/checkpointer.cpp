// Checkpointer: writing checkpoints (every rank's generators gathered, rank 0 writes, in the
// background with ckpt.async) and resuming from one.
#include "hpctrain/train/checkpointer.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>

#include "hpctrain/config/parser.h"
#include "hpctrain/core/activity.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/core/trace.h"
#include "hpctrain/core/version.h"
#include "hpctrain/model/lora.h"
#include "hpctrain/train/lora_base.h"
#include "hpctrain/train/train_state.h"

namespace hpctrain::train {
namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

// After checkpoint `path` was written in `seconds`: names it `best` if asked, prunes to
// `keep_last`, and logs what it cost. `blocked_s`: how long training waited for a background write
// (ckpt.async); < 0 when training waited for the whole write.
void after_write(const std::string& dir, const std::string& path, double seconds, bool best, std::int64_t keep_last,
                 double blocked_s) {
  if (best) ckpt::mark_best(dir, path);
  ckpt::prune_checkpoints(dir, keep_last);
  const double megabytes = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
  const double rate = megabytes / std::max(seconds, 1e-9);
  if (blocked_s < 0) {
    log::info("checkpoint {} written in {:.2f} s ({:.1f} MB, {:.0f} MB/s; training waited for it)", path,
              seconds, megabytes, rate);
  } else {
    log::info("checkpoint {} written in the background in {:.2f} s ({:.1f} MB, {:.0f} MB/s); training "
              "waited {:.3f} s", path, seconds, megabytes, rate, blocked_s);
  }
}

// Writes the checkpoint, then after_write.
std::string commit_checkpoint(const std::string& dir, const ckpt::Checkpoint& checkpoint, bool best,
                              std::int64_t keep_last, double blocked_s) {
  activity::fault_point("checkpoint-write");
  const Timer timer;
  const std::string path = ckpt::write_checkpoint(dir, checkpoint);
  after_write(dir, path, timer.elapsed_s(), best, keep_last, blocked_s);
  return path;
}

// The parameters (a LoRA model's frozen base among them or not), buffers and tied names.
ckpt::NamedTensors weights(model::Model& model, bool with_frozen_base) {
  ckpt::NamedTensors out;
  std::set<std::string> left_out;
  for (auto& p : model.module().named_parameters()) {
    if (with_frozen_base || p.value().requires_grad()) {
      out.emplace_back(p.key(), p.value());
    } else {
      left_out.insert(p.key());
    }
  }
  for (auto& b : model_buffers(model)) out.push_back(std::move(b));
  for (const auto& tied : model.tied_parameters()) {
    if (left_out.count(tied.same_as) == 0) out.emplace_back(tied.name, tied.tensor);
  }
  return out;
}

// What a rank adds of its own: the optimizer state and the moving average, whole (rank 0's is
// written) or, when sharded, this rank's slices (every rank's are written).
void add_own_state(Step& step, ckpt::Checkpoint& checkpoint) {
  step.update().add_state(checkpoint);
  if (const WeightAverage* average = step.average()) average->add_to(checkpoint);
}

}  // namespace

ckpt::NamedTensors model_state(model::Model& model) { return weights(model, !model::has_adapters(model)); }

ckpt::NamedTensors all_weights(model::Model& model) { return weights(model, true); }

ckpt::NamedTensors model_buffers(model::Model& model) {
  ckpt::NamedTensors out;
  for (auto& b : model.module().named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

Checkpointer::Checkpointer(const config::Config& config, comm::ControlPlane& control, RunDirectory run_dir,
                           c10::Device device)
    : config_(config), control_(control), run_dir_(std::move(run_dir)), device_(device) {}

std::string Checkpointer::save(Step& step, const RunPosition& at, const BestEvaluation& best_so_far, bool best) {
  // Waiting for the other ranks has no limit of its own (a rank that dies or freezes is found by
  // the rank watch); rank 0's write has one, ckpt.write_timeout_s (Note [Rank watch]).
  const activity::Scope waiting(activity::Kind::kCheckpointWait);
  const trace::Span span("checkpoint");
  const Timer blocked;
  // With ckpt.async, rank 0 first waits for its previous write while the others wait for it in
  // the gathering, on the control plane, where nothing but rank 0's own limit times them out.
  if (config_.ckpt.async) wait_for_background_write();
  ckpt::NamedTensors generators = gather_generators();
  step.sync_buffers();
  if (base_checksums_.empty() && control_.world_rank() == 0) base_checksums_ = base_checksums(step.model());
  std::string path;
  if (step.update().zero_stage() > 0) {
    path = save_sharded(step, at, best_so_far, std::move(generators), best);
  } else if (control_.world_rank() == 0) {
    const activity::Scope writing(activity::Kind::kCheckpoint);
    const ckpt::Checkpoint checkpoint = assemble(step, at, best_so_far, std::move(generators));
    const std::string dir = run_dir_.checkpoints_dir();
    const std::int64_t keep_last = config_.ckpt.keep_last;
    if (config_.ckpt.async) {
      // Shared: std::function needs a copyable job.
      auto copy = std::make_shared<const ckpt::Checkpoint>(ckpt::host_copy(checkpoint));
      path = ckpt::checkpoint_path(dir, at.step);
      writer_.start([copy, dir, keep_last, best, waited = blocked.elapsed_s()] {
        trace::name_thread("checkpoint");
        const trace::Span background_write("checkpoint write");
        commit_checkpoint(dir, *copy, best, keep_last, waited);
      });
    } else {
      path = commit_checkpoint(dir, checkpoint, best, keep_last, /*blocked_s=*/-1);
    }
  }
  // No rank leaves before the checkpoint is on disk (with ckpt.async: before the run ends). The
  // control plane's barrier has no timeout: a large write may take longer than dist.timeout_s,
  // and a rank that dies ends the job anyway.
  if (!config_.ckpt.async) control_.barrier();
  last_ = path;
  written_ = at;
  return path;
}

// Note [Sharded checkpoints]: the optimizer state of a sharded update is written by the ranks that
// hold it, into one file that reads exactly like a replicated run's (docs/checkpoint-format.md):
// rank 0 starts it with everything else and its own slices, each other rank in rank order adds its
// slices (HDF5 serial writers take turns), and rank 0 publishes it once every rank said it
// succeeded; a failure anywhere discards it and ends every rank with the failing rank's error. No
// rank ever holds more optimizer state than its own.
std::string Checkpointer::save_sharded(Step& step, const RunPosition& at, const BestEvaluation& best_so_far,
                                       ckpt::NamedTensors generators, bool best) {
  const Timer timer;
  const int rank = control_.world_rank();
  const std::string dir = run_dir_.checkpoints_dir();
  std::string temp;
  std::string error;
  ckpt::Checkpoint mine;
  if (rank == 0) {
    const activity::Scope writing(activity::Kind::kCheckpoint);
    try {
      activity::fault_point("checkpoint-write");
      temp = ckpt::start_checkpoint(dir, assemble(step, at, best_so_far, std::move(generators)));
    } catch (const CheckpointError& e) {
      error = e.what();
    }
  } else {
    add_own_state(step, mine);
  }
  std::vector<std::uint8_t> bytes(temp.begin(), temp.end());
  control_.broadcast_bytes(bytes, 0);
  temp.assign(bytes.begin(), bytes.end());
  for (int r = 1; r < control_.world_size(); ++r) {
    control_.barrier();
    if (rank != r || temp.empty()) continue;
    const activity::Scope writing(activity::Kind::kCheckpoint);
    try {
      ckpt::add_slices(temp, mine.slices);
    } catch (const CheckpointError& e) {
      error = e.what();
    }
  }
  const std::vector<std::string> errors = control_.allgather_string(error);
  for (size_t r = 0; r < errors.size(); ++r) {
    if (errors[r].empty()) continue;
    if (rank == 0 && !temp.empty()) ckpt::discard_checkpoint(temp);
    throw CheckpointError("rank " + std::to_string(r) + ": " + errors[r]);
  }
  std::string path = ckpt::checkpoint_path(dir, at.step);
  if (rank == 0) {
    path = ckpt::publish_checkpoint(dir, temp, at.step);
    after_write(dir, path, timer.elapsed_s(), best, config_.ckpt.keep_last, /*blocked_s=*/-1);
  }
  return path;
}

// Every rank's generators, gathered on the control plane (no collective is in flight here).
ckpt::NamedTensors Checkpointer::gather_generators() {
  ckpt::NamedTensors generators;
  for (const auto& [name, state] : rng_state(device_)) {
    const at::Tensor bytes = state.to(at::kCPU).contiguous();
    const auto all = control_.allgather_string(
        std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.nbytes())));
    for (size_t r = 0; r < all.size(); ++r) {
      at::Tensor copy = at::empty({static_cast<std::int64_t>(all[r].size())}, at::kByte);
      std::memcpy(copy.data_ptr(), all[r].data(), all[r].size());
      generators.emplace_back("rank-" + std::to_string(r) + "/" + name, copy);
    }
  }
  return generators;
}

ckpt::Checkpoint Checkpointer::assemble(Step& step, const RunPosition& at, const BestEvaluation& best_so_far,
                                        ckpt::NamedTensors generators) const {
  ckpt::Checkpoint checkpoint;
  ckpt::CheckpointMeta& meta = checkpoint.meta;
  meta.hpctrain_version = version();
  meta.step = at.step;
  meta.epoch = at.epoch;
  meta.cursor = at.cursor;
  meta.world_size = control_.world_size();
  meta.model_name = config::name_of(config_.model.name);
  meta.config_text = config::to_ini(config_);
  meta.created = utc_now();
  // At stage 3 each rank adds its slices of the parameters; the buffers are whole everywhere.
  checkpoint.groups["model"] = step.update().shards_parameters() ? model_buffers(step.model()) : model_state(step.model());
  add_own_state(step, checkpoint);
  checkpoint.groups["sched"] = {{"step", torch::full({}, at.step, torch::kLong)}};
  for (auto& entry : step.skipped().state()) checkpoint.groups["sched"].push_back(std::move(entry));
  checkpoint.groups["rng"] = std::move(generators);
  ckpt::NamedTensors bests;
  if (best_so_far.test_acc) bests.emplace_back("best_test_acc", torch::full({}, *best_so_far.test_acc, torch::kDouble));
  if (best_so_far.test_loss) bests.emplace_back("best_test_loss", torch::full({}, *best_so_far.test_loss, torch::kDouble));
  if (!bests.empty()) checkpoint.groups["metrics"] = std::move(bests);
  if (const LossScaler* scaler = step.loss_scaler()) checkpoint.groups["loss_scaler"] = scaler->state();
  if (!base_checksums_.empty()) checkpoint.groups["base"] = base_checksums_;
  return checkpoint;
}

// Rank 0, with ckpt.async: waits for the write in flight, if any, as writing (timed by
// ckpt.write_timeout_s), while the other ranks wait for rank 0 in the control plane (untimed).
void Checkpointer::wait_for_background_write() {
  if (control_.world_rank() != 0) return;
  const activity::Scope writing(activity::Kind::kCheckpoint);
  writer_.wait();
}

void Checkpointer::finish() {
  if (!config_.ckpt.async) return;
  wait_for_background_write();
  const activity::Scope waiting(activity::Kind::kCheckpointWait);
  control_.barrier();
}

}  // namespace hpctrain::train
