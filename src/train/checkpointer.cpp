// Checkpointer: writing checkpoints (every rank's generators gathered, rank 0 writes, or every
// rank its part of a sharded state; in the background with ckpt.async) and resuming from one.
#include "hpctrain/train/checkpointer.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>

#include "hpctrain/config/parser.h"
#include "hpctrain/core/activity.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/core/trace.h"
#include "hpctrain/core/version.h"
#include "hpctrain/optim/train_state.h"
#include "hpctrain/sharding/strategy.h"
#include "hpctrain/weights/lora_base.h"
#include "checkpoint_parts.h"

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

// What the parts of a checkpoint of `step` at `at` are written from.
SaveSources sources_of(Step& step, const RunPosition& at, const BestEvaluation& best,
                       const ckpt::NamedTensors& generators, const ckpt::NamedTensors& base_checksums) {
  return {step.model(), step.strategy().shards_parameters(), step.update_state(), step.average(), step.skipped(),
          step.loss_scaler(), at.step, best, generators, base_checksums};
}

// Every part of a checkpoint, or (`own_only`) those each rank holds its own share of: the
// optimizer state and the moving average, whole (rank 0's is written) or, when sharded, this
// rank's slices (every rank's are written).
void add_parts(const SaveSources& from, bool own_only, ckpt::Checkpoint& checkpoint) {
  for (const CheckpointPart& part : checkpoint_parts()) {
    if (part.per_rank || !own_only) part.save(from, checkpoint);
  }
}

// What rank `rank`'s part of a sharded write failed with ("<exit code> <message>"), thrown again.
[[noreturn]] void throw_part_error(size_t rank, const std::string& failure) {
  const auto space = failure.find(' ');
  const auto code = static_cast<ExitCode>(std::stoi(failure.substr(0, space)));
  const std::string message = "rank " + std::to_string(rank) + ": " + failure.substr(space + 1);
  if (code == ExitCode::kCheckpoint) throw CheckpointError(message);
  throw Error(message, code);
}

// Note [Sharded checkpoints]: the optimizer state of a sharded update is written by the ranks that
// hold it, into one file that reads exactly like a replicated run's (docs/checkpoint-format.md):
// rank 0 starts it with everything else and its own slices, each other rank in rank order adds its
// slices (HDF5 serial writers take turns), and rank 0 publishes it once every rank said it
// succeeded; a failure anywhere discards it and ends every rank with the failing rank's error. A
// rank that fails still takes its turns and says so in the gathering, so none waits for it. No
// rank ever holds more optimizer state than its own. With ckpt.async each rank hands a host copy
// of its part to its background writer, and the writers take their turns on a control plane of
// their own while training goes on with the world's; each rank rethrows an error at its next step.
//
// Collective over `plane`. `part`: rank 0's, the checkpoint but the other ranks' slices; another
// rank's, its slices. `timed`: the writes count as activity kCheckpoint (ckpt.write_timeout_s),
// which only the training thread's may. Returns the path, or throws on every rank the same error,
// with the failing rank's exit code.
std::string write_in_turns(const comm::ControlPlane& plane, const std::string& dir, const ckpt::Checkpoint& part,
                           std::int64_t step, bool best, std::int64_t keep_last, double blocked_s, bool timed) {
  const Timer timer;
  const int rank = plane.world_rank();
  std::string temp;
  std::string error;  // this rank's failure: its exit code, a space, its message
  const auto write = [&](const auto& what) {
    try {  // any error: the other ranks must hear of it
      std::optional<activity::Scope> writing;
      if (timed) writing.emplace(activity::Kind::kCheckpoint);
      activity::fault_point("checkpoint-write");
      what();
    } catch (const Error& e) {
      error = std::to_string(static_cast<int>(e.code())) + " " + e.what();
    } catch (const std::exception& e) {
      error = std::to_string(static_cast<int>(ExitCode::kInternal)) + " " + e.what();
    }
  };
  if (rank == 0) write([&] { temp = ckpt::start_checkpoint(dir, part); });
  std::vector<std::uint8_t> bytes(temp.begin(), temp.end());
  plane.broadcast_bytes(bytes, 0);
  temp.assign(bytes.begin(), bytes.end());
  for (int r = 1; r < plane.world_size(); ++r) {
    plane.barrier();
    if (rank == r && !temp.empty()) write([&] { ckpt::add_slices(temp, part.slices); });
  }
  const std::vector<std::string> errors = plane.allgather_string(error);
  for (size_t r = 0; r < errors.size(); ++r) {
    if (errors[r].empty()) continue;
    if (rank == 0 && !temp.empty()) ckpt::discard_checkpoint(temp);
    throw_part_error(r, errors[r]);
  }
  if (rank != 0) return ckpt::checkpoint_path(dir, step);
  const std::string path = ckpt::publish_checkpoint(dir, temp, step);
  after_write(dir, path, timer.elapsed_s(), best, keep_last, blocked_s);
  return path;
}

}  // namespace

Checkpointer::Checkpointer(const config::Config& config, comm::ControlPlane& control, runtime::RunDirectory run_dir,
                           c10::Device device)
    : config_(config), control_(control), run_dir_(std::move(run_dir)), device_(device) {
  const sharding::Strategy strategy(config_.dist);
  if (!config_.ckpt.async || !strategy.shards_state()) return;
  background_plane_ = control_.duplicate();
  HT_CHECK(background_plane_ != nullptr, "check_mpi_threads refuses ckpt.async without MPI_THREAD_MULTIPLE");
}

std::string Checkpointer::save(Step& step, const RunPosition& at, const BestEvaluation& best_so_far, bool best) {
  // Waiting for the other ranks has no limit of its own (a rank that dies or freezes is found by
  // the rank watch); rank 0's write has one, ckpt.write_timeout_s (Note [Rank watch]).
  const activity::Scope waiting(activity::Kind::kCheckpointWait);
  const trace::Span span("checkpoint");
  const Timer blocked;
  // With ckpt.async a rank first waits for its previous write: rank 0 alone unless sharded, the
  // others waiting for it in the gathering, on the control plane, where nothing but rank 0's own
  // limit times them out.
  if (config_.ckpt.async) wait_for_background_write();
  ckpt::NamedTensors generators = gather_generators();
  step.sync_buffers();
  if (base_checksums_.empty() && control_.world_rank() == 0) base_checksums_ = weights::base_checksums(step.model());
  std::string path;
  if (step.strategy().shards_state()) {
    path = save_sharded(step, at, best_so_far, std::move(generators), best, blocked);
  } else if (control_.world_rank() == 0) {
    const activity::Scope writing(activity::Kind::kCheckpoint);
    const ckpt::Checkpoint checkpoint = assemble(step, at, best_so_far, std::move(generators));
    const std::string dir = run_dir_.checkpoints_dir();
    const std::int64_t keep_last = config_.ckpt.keep_last;
    if (config_.ckpt.async) {
      // Shared: std::function needs a copyable job.
      auto copy = std::make_shared<const ckpt::Checkpoint>(staging_.copy(checkpoint));
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

// Note [Sharded checkpoints] (above write_in_turns).
std::string Checkpointer::save_sharded(Step& step, const RunPosition& at, const BestEvaluation& best_so_far,
                                       ckpt::NamedTensors generators, bool best, const Timer& blocked) {
  const std::string dir = run_dir_.checkpoints_dir();
  const std::int64_t keep_last = config_.ckpt.keep_last;
  ckpt::Checkpoint part;
  if (control_.world_rank() == 0) {
    part = assemble(step, at, best_so_far, std::move(generators));
  } else {
    add_parts(sources_of(step, at, best_so_far, /*generators=*/{}, base_checksums_), /*own_only=*/true, part);
  }
  if (!config_.ckpt.async) {
    return write_in_turns(control_, dir, part, at.step, best, keep_last, /*blocked_s=*/-1, /*timed=*/true);
  }
  auto copy = std::make_shared<const ckpt::Checkpoint>(staging_.copy(part));
  writer_.start([plane = background_plane_, copy, dir, step = at.step, best, keep_last,
                 waited = blocked.elapsed_s()] {
    trace::name_thread("checkpoint");
    const trace::Span background_write("checkpoint write");
    write_in_turns(*plane, dir, *copy, step, best, keep_last, waited, /*timed=*/false);
  });
  return ckpt::checkpoint_path(dir, at.step);
}

// Every rank's generators, gathered on the control plane (no collective is in flight here).
ckpt::NamedTensors Checkpointer::gather_generators() {
  ckpt::NamedTensors generators;
  for (const auto& [name, state] : optim::rng_state(device_)) {
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
  add_parts(sources_of(step, at, best_so_far, generators, base_checksums_), /*own_only=*/false, checkpoint);
  return checkpoint;
}

// With ckpt.async: waits for this rank's write in flight, if any. Rank 0 waits as writing (timed
// by ckpt.write_timeout_s); the others wait for rank 0 (untimed): unsharded, in the gathering that
// follows, on the control plane; sharded, here, for writers that wait for rank 0's turns, whose
// limit ends the job when one of them hangs.
void Checkpointer::wait_for_background_write() {
  const bool first = control_.world_rank() == 0;
  if (!first && !background_plane_) return;
  const activity::Scope writing(first ? activity::Kind::kCheckpoint : activity::Kind::kCheckpointWait);
  writer_.wait();
}

void Checkpointer::finish() {
  if (!config_.ckpt.async) return;
  wait_for_background_write();
  const activity::Scope waiting(activity::Kind::kCheckpointWait);
  control_.barrier();
}

}  // namespace hpctrain::train
