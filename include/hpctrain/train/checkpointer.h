// A training run's checkpoints: every rank's generators gathered, rank 0 writes, or every rank its
// part of a sharded state (in the background with ckpt.async), checkpoints/best and pruning; and
// resuming a run from one (ckpt.resume). What a checkpoint holds: docs/checkpoint-format.md.
// Depends on ckpt, comm's ControlPlane, config and the train module's Step, Evaluation and resume
// parts.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/comm/control_plane.h"
#include "hpctrain/config/config.h"
#include "hpctrain/core/background_job.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/model/model.h"
#include "hpctrain/runtime/run_directory.h"
#include "hpctrain/train/evaluator.h"
#include "hpctrain/train/step.h"

namespace hpctrain::train {

// Where a run is: optimizer steps taken, and the epoch and sampler cursor its next step starts at.
struct RunPosition {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t cursor = 0;
  bool operator==(const RunPosition& other) const {
    return step == other.step && epoch == other.epoch && cursor == other.cursor;
  }
};

// What a resume found.
struct Resumed {
  RunPosition position;
  BestEvaluation best;
};

class Checkpointer {
 public:
  // Collective. ckpt.async with dist.zero_stage > 0 needs a control plane that duplicates
  // (MPI_THREAD_MULTIPLE; check_mpi_threads refuses the options without it): the ranks'
  // background writers talk on a plane of their own.
  Checkpointer(const config::Config& config, comm::ControlPlane& control, runtime::RunDirectory run_dir, c10::Device device);

  // Collective: a checkpoint of `step` at `at`, with the best evaluation so far; `best`: also
  // named by checkpoints/best (ckpt.keep_best), which pruning spares. With ckpt.async a rank
  // returns once a host copy of what it writes is handed to its background writer. Returns the
  // path.
  std::string save(Step& step, const RunPosition& at, const BestEvaluation& best_so_far, bool best = false);
  // The last checkpoint written holds `at`.
  bool holds(const RunPosition& at) const { return written_ && *written_ == at; }
  // The last checkpoint's path ("" before the first).
  const std::string& last() const { return last_; }
  // A background write that failed ends the run now (its error rethrown).
  void rethrow_if_failed() { writer_.rethrow_if_failed(); }
  // Collective, at the end of a run: with ckpt.async, waits until the last write is on disk.
  void finish();

  // Collective: continues from the checkpoint ckpt.resume picks into `step` (nullopt: none, start
  // fresh). A config that differs in what is computed is a ConfigError. `accumulation` and
  // `peak_lr`: this run's, for the message when the world size changed.
  std::optional<Resumed> resume(Step& step, std::int64_t accumulation, double peak_lr);

 private:
  std::string save_sharded(Step& step, const RunPosition& at, const BestEvaluation& best_so_far,
                           ckpt::NamedTensors generators, bool best, const Timer& blocked);
  ckpt::NamedTensors gather_generators();
  ckpt::Checkpoint assemble(Step& step, const RunPosition& at, const BestEvaluation& best_so_far,
                            ckpt::NamedTensors generators) const;
  void wait_for_background_write();
  std::string choose() const;
  void check_config_unchanged(const ckpt::CheckpointReader& reader) const;
  void explain_world_change(const ckpt::CheckpointMeta& meta, const RunPosition& at, std::int64_t accumulation,
                            double peak_lr) const;

  config::Config config_;
  comm::ControlPlane& control_;
  runtime::RunDirectory run_dir_;
  c10::Device device_;
  std::string last_;                       // the last checkpoint's path
  std::optional<RunPosition> written_;     // and the position it holds
  ckpt::NamedTensors base_checksums_;      // of a LoRA model's frozen base, computed once
  // ckpt.async with a sharded state: the background writers' own control plane.
  // Shared with the writer's thread, which may outlive this object (~BackgroundJob).
  std::shared_ptr<comm::ControlPlane> background_plane_;
  ckpt::HostStaging staging_;  // ckpt.async: the host copies the background writer writes
  BackgroundJob writer_;  // ckpt.async: rank 0's, or every rank's when sharded; last, so destroyed (waited for) first
};

}  // namespace hpctrain::train
