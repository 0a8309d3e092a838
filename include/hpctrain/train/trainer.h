// The training loop of one rank (docs/architecture.md, "One training step, as data"): per
// optimizer step, read (the epoch's micro-batches, finished on the device), step (Step: forward,
// backward, gradient reduction, update), policy (RunPolicy: a record, an evaluation, a checkpoint,
// a stop). Resumes from a checkpoint first; evaluates at every epoch's end; writes a final
// checkpoint. The control plane and the communicator are the caller's. Depends on every module
// below it.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "hpctrain/comm/control_plane.h"
#include "hpctrain/config/config.h"
#include "hpctrain/data/epoch_reader.h"
#include "hpctrain/data/source.h"
#include "hpctrain/observe/metrics_writer.h"
#include "hpctrain/observe/op_profile.h"
#include "hpctrain/observe/progress_report.h"
#include "hpctrain/runtime/run_directory.h"
#include "hpctrain/train/checkpointer.h"
#include "hpctrain/train/evaluator.h"
#include "hpctrain/train/run_policy.h"
#include "hpctrain/train/step.h"

namespace hpctrain::comm {
class Communicator;
}

namespace hpctrain::train {

// Everything a run needs that can be checked before MPI starts, so a bad config or dataset stops
// every rank the same way before anything is written: the data to train on and to evaluate on (a
// sample split, or a token stream for a language model) and the model that fits it.
struct TrainingSetup {
  config::Config config;
  std::shared_ptr<const data::Source> train;  // null for evaluation only
  std::shared_ptr<const data::Source> eval;   // null without data.eval_split
  std::shared_ptr<model::Model> model;
  int threads = 1;        // intra-op threads of this rank
  bool use_cuda = false;  // dist.device resolved; the GPU index follows once MPI knows the node
  std::int64_t checkpoint_bytes = 0;  // about what one checkpoint takes (runtime/checkpoint_room.h)
  std::int64_t rss_before_model = 0;  // this process's resident memory before the model was built

  bool language_model() const { return (train ? train : eval)->language_model(); }
};

// Sets the thread count and seed, reads the data and builds the model; for training, starts it from
// model.init_from's weights (a gpt's shape options given as 0 filled from them, also for
// evaluation). Throws ConfigError/DataError, and CheckpointError for the weights file.
TrainingSetup prepare_training(const config::Config& config, bool need_train_split);

// What depends on the world size, checked once MPI knows it and before the run directory is
// created: train.global_batch divides among the ranks, a rank's micro-batch is no larger than its
// share of the training split, and train.drop_last leaves a step to run.
// Throws ConfigError, alike on every rank.
void check_world_fits(const TrainingSetup& setup, int world_size);

// Intra-op threads: train.threads, or the cores this process is bound to when 0.
int configure_threads(const config::TrainConfig& train);

struct TrainSummary {
  std::int64_t steps = 0;
  std::optional<EvalResult> last_eval;
  std::string checkpoint;  // path of the last checkpoint written, "" if none
  bool stopped = false;    // stopped on a signal (ckpt.signals) after writing `checkpoint`
  // Non-empty when non-finite steps stopped the run (train.nonfinite, train.max_skipped) after
  // writing `checkpoint`: the same one-line reason on every rank (exit code 6).
  std::string failure;
};

class Trainer {
 public:
  // Collective: builds the Step (rank 0's parameters everywhere) on `device`; `control` and
  // `comm` must outlive the Trainer.
  Trainer(TrainingSetup setup, comm::ControlPlane& control, comm::Communicator& comm, c10::Device device,
          runtime::RunDirectory run_dir);
  ~Trainer();

  // Collective: resumes from a checkpoint (ckpt.resume), trains for train.epochs (or up to
  // train.max_steps) or until a stop signal, and returns what happened.
  TrainSummary run();

 private:
  void plan_run();
  void start_timeline();
  bool train_epoch(std::int64_t epoch, std::int64_t cursor);
  bool after_step(const StepResult& result, const data::StepInput& input, const data::EpochReader& reader,
                  std::int64_t epoch, bool last);
  void record(const StepResult& result, const data::EpochReader& reader, std::int64_t epoch);
  std::optional<EvalResult> evaluate(std::int64_t epoch);
  std::string save_checkpoint(bool best = false);
  std::string checkpoint_of_position();
  void warn_of_skipped_step(const StepResult& result);
  void stop_on_nonfinite(const StepResult& result);
  TrainSummary finish(std::optional<EvalResult> last_eval);
  RunPosition position() const { return {step_.count(), epoch_, cursor_}; }

  TrainingSetup setup_;
  comm::ControlPlane& control_;
  c10::Device device_;
  runtime::RunDirectory run_dir_;
  observe::MetricsWriter metrics_;
  Step step_;
  RunPolicy policy_;
  observe::ProgressReport progress_;
  Evaluation evaluation_;
  observe::OpProfile profile_;  // log.profile_steps
  std::unique_ptr<data::Sampler> sampler_;
  std::int64_t accumulation_ = 1;      // micro-batches per optimizer step
  std::int64_t steps_per_epoch_ = 0;   // optimizer steps of a whole epoch at this world size
  double peak_lr_ = 0.0;               // optim.lr scaled for the global batch (optim.lr_scaling)
  std::int64_t total_steps_ = 0;       // of the whole run, for the schedule
  // Where the next step starts (the position after the last step): what a checkpoint records.
  std::int64_t epoch_ = 0;
  std::int64_t cursor_ = 0;
  bool stopped_ = false;               // the ranks agreed to stop on a signal
  std::string failure_;                // why non-finite steps stopped the run, or ""
  Checkpointer checkpointer_;          // last: destroyed (its background write waited for) first
};

}  // namespace hpctrain::train
