// The trainer's state and the steps it takes, shared by the files that implement Trainer:
// trainer.cpp (set-up, the epoch loop, run), trainer_progress.cpp (the first forward's FLOP
// count, progress records, evaluation, non-finite steps) and trainer_checkpoint.cpp (checkpoints
// and resume). Private to src/train.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/activity.h"
#include "hpctrain/core/background_job.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/stop_signals.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/data/distributed_sampler.h"
#include "hpctrain/data/loader.h"
#include "hpctrain/data/token_windows.h"
#include "hpctrain/ddp/grad_sync.h"
#include "hpctrain/model/batch_norm.h"
#include "hpctrain/model/model.h"
#include "hpctrain/train/device.h"
#include "hpctrain/train/loss_scaler.h"
#include "hpctrain/train/lr_schedule.h"
#include "hpctrain/train/metrics_writer.h"
#include "hpctrain/train/mfu.h"
#include "hpctrain/train/nonfinite.h"
#include "hpctrain/train/step_timing.h"
#include "hpctrain/train/trainer.h"

namespace hpctrain::train {

// Which samples (or token windows) each step of an epoch takes: the DistributedSampler of a
// sample split or the TokenWindowSampler of a token stream; both count one global cursor.
struct EpochPlan {
  std::optional<data::DistributedSampler> samples;
  std::optional<data::TokenWindowSampler> windows;

  std::vector<data::SamplerStep> steps(std::int64_t epoch, std::int64_t cursor) const {
    return samples ? samples->steps(samples->global_order(epoch), cursor) : windows->steps(epoch, cursor);
  }
  std::int64_t steps_from(std::int64_t cursor) const {
    return samples ? samples->steps_from(cursor) : windows->steps_from(cursor);
  }
};

struct Trainer::State {
  TrainingSetup setup;
  comm::Bootstrap& bootstrap;
  RunDirectory run_dir;
  c10::Device device;
  std::unique_ptr<comm::Communicator> comm;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<ddp::GradSync> grad_sync;
  std::vector<at::Tensor> buffers;
  std::vector<at::Tensor> buffers_before_step;  // restored when a step is skipped
  MetricsWriter metrics;
  std::vector<std::string> parameter_names;  // in the optimizer's order
  std::vector<at::Tensor> parameters;        // in the module's order
  std::vector<std::string> gradient_names;   // of `parameters`, for messages
  std::int64_t accum = 1;     // micro-batches per optimizer step (train.global_batch or accum_steps)
  double peak_lr = 0.0;       // optim.lr scaled for the global batch (optim.lr_scaling)
  std::optional<double> grad_norm;  // of the last step's averaged gradients, when computed
  bool flops_counted = false;             // the first forward pass has been counted
  std::optional<double> training_flops;  // per sample (model/flops.h), once counted
  std::optional<PeakFlops> peak_flops;   // one device's, for MFU (train.peak_tflops)
  std::optional<LossScaler> loss_scaler;  // train.loss_scale (on by default with fp16)
  SkippedSteps skipped;                   // train.nonfinite, train.max_skipped
  std::int64_t step = 0;         // optimizer steps taken
  std::int64_t total_steps = 0;  // of the whole run, for the schedule
  std::int64_t steps_per_full_epoch = 0;  // at this run's world size, for the ETA
  std::int64_t start_epoch = 0;  // where run() begins: 0, or a checkpoint's epoch and cursor
  std::int64_t start_cursor = 0;
  std::int64_t epoch_now = 0;  // the position after the last step: what a checkpoint records
  std::int64_t cursor_now = 0;
  std::optional<double> best_test_acc;   // a classifier's best evaluation
  std::optional<double> best_test_loss;  // a language model's (lower is better)
  bool improved = false;  // the last evaluation beat the best one
  std::string last_checkpoint;  // and the position it holds
  std::int64_t written_step = -1;
  std::int64_t written_epoch = -1;
  std::int64_t written_cursor = -1;
  bool stopped = false;  // the ranks agreed to stop on a signal
  bool first_step_noted = false;  // note_first_step() has run in this process
  std::string failure;   // why non-finite steps stopped the run (all ranks alike), or ""
  Timer since_checkpoint;  // for ckpt.every_minutes (rank 0's decides)
  BackgroundJob checkpoint_writer;  // ckpt.async, on rank 0; last, so destroyed (waited for) first

  State(TrainingSetup s, comm::Bootstrap& b, RunDirectory dir)
      : setup(std::move(s)), bootstrap(b), run_dir(std::move(dir)),
        device(device_for_rank(setup.use_cuda, b.topology(), setup.config.dist.allow_shared_gpu)),
        metrics(run_dir.metrics_path(), b.world_rank() == 0),
        skipped({setup.config.train.nonfinite == "abort", setup.config.train.max_skipped}) {}

  const config::Config& config() const { return setup.config; }
  model::Model& net() { return *setup.model; }

  // Note [Buffers follow rank 0]: BatchNorm running statistics are not gradients; each rank's would
  // drift with its own batches. As in PyTorch DDP they are overwritten with rank 0's before every
  // forward, and again before evaluation and checkpoints, so every replica holds the same model.
  void sync_buffers() {
    if (!buffers.empty() && comm->size() > 1) ddp::broadcast_tensors(*comm, buffers, 0);
  }

  // data.io=mpio: the split is read once by all ranks together, before the first epoch.
  void read_train_split_collectively() {
    if (config().data.io != "mpio" || !setup.train_split) return;
    if (!setup.train_split->caches_blocks()) {
      log::warn("data.io=mpio applies to a split held in memory; '{}' is larger than data.cache_mb={} "
                "and is read block by block with POSIX reads",
                config().data.train_split, config().data.cache_mb);
      return;
    }
    const Timer timer;
    setup.train_split->preload_collective();
    log::info("split '{}' read through MPI-IO by {} rank(s) in {:.2f} s", config().data.train_split,
              bootstrap.world_size(), timer.elapsed_s());
  }

  // Once per process: how long start-up took (libraries, data, a checkpoint to resume from), the
  // figure that grows with a loaded file system and with the number of ranks. Rank 0's, in the log
  // and as a metrics record {"step", "first_step_s", "unix_time"}.
  void note_first_step() {
    first_step_noted = true;
    const double age_s = sys::process_age_s();
    log::info("first optimizer step done {:.2f} s after this process started", age_s);
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    metrics.write({{"step", step},
                   {"first_step_s", age_s},
                   {"unix_time", std::chrono::duration<double>(now).count()}});
  }

  // The model's forward pass; the first of this process is counted (model/flops.h) for the
  // metrics' model_tflops and mfu: the FLOPs of the very path training takes (train mode,
  // gradients, autocast), per row of the batch.
  at::Tensor forward(const at::Tensor& input);

  // dist.check_replicas_every: every replica must hold rank 0's parameters, bit for bit.
  void check_replicas() {
    const std::int64_t every = config().dist.check_replicas_every;
    if (every == 0 || step % every != 0) return;
    const std::vector<int> differ =
        ddp::ranks_differing_from_root(*comm, net().module().parameters(), device);
    if (differ.empty()) return;
    std::string ranks;
    for (const int r : differ) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    throw Error("parameters of rank(s) " + ranks + " differ from rank 0's after step " +
                std::to_string(step) + " (dist.check_replicas_every=" + std::to_string(every) +
                "): a rank-dependent code path or a nondeterministic reduction; rerun with "
                "--dist.check_replicas_every=1 to find the first step");
  }

  // dist.sync_bn: BatchNorm layers reduce their statistics over the ranks (model/batch_norm.h).
  void synchronize_batch_norm() {
    if (!config().dist.sync_bn) return;
    model::BatchStatsReducer reduce;
    if (comm->size() > 1) {
      reduce = [c = comm.get()](at::Tensor& stats) { c->allreduce_blocking(stats, comm::ReduceOp::kSum); };
    }
    const int layers = model::set_batch_stats_reducer(net().module(), reduce);
    if (layers == 0) {
      log::warn("dist.sync_bn=true, but model {} has no BatchNorm layer of hpctrain's{}; nothing to synchronize",
                config().model.name,
                config().model.name == "torchscript" ? " (a TorchScript module's normalize over each rank's batch)" : "");
    } else {
      log::info("dist.sync_bn: {} BatchNorm layer(s) normalize over the batches of all {} rank(s)", layers,
                comm->size());
    }
  }

  bool step_limit_reached() const {
    return config().train.max_steps > 0 && step >= config().train.max_steps;
  }

  // Note [Step boundary]: whether to stop (a signal reached any rank) and whether a timed
  // checkpoint is due (rank 0's clock decides), agreed by all ranks in one allreduce of two flags
  // on the control plane. At a step boundary no collective of the communicator is in flight, so
  // Bootstrap's MPI calls are safe here.
  struct Boundary {
    bool stop = false;
    bool checkpoint_due = false;
  };
  Boundary at_step_boundary() {
    const double every_minutes = config().ckpt.every_minutes;
    if (config().ckpt.signals.empty() && every_minutes <= 0) return {};
    if (step % config().ckpt.check_every_steps != 0) return {};
    float flags[2] = {sys::stop_signal() != 0 ? 1.0f : 0.0f,
                      bootstrap.world_rank() == 0 && every_minutes > 0 &&
                              since_checkpoint.elapsed_s() >= every_minutes * 60
                          ? 1.0f
                          : 0.0f};
    if (bootstrap.world_size() > 1) bootstrap.allreduce_sum(flags, 2);
    if (flags[0] > 0 && bootstrap.world_rank() == 0) {
      log::warn("stop requested ({} on {} rank(s)); writing a checkpoint at step {}",
                sys::stop_signal() != 0 ? sys::signal_name(sys::stop_signal()) : "a signal",
                static_cast<int>(flags[0]), step);
    }
    return {flags[0] > 0, flags[1] > 0};
  }

  // optim.clip_grad_norm on the averaged gradients, equal on every rank, so every rank clips
  // alike. Returns the norm before clipping when it was computed (clipping, or `want_norm`).
  std::optional<double> clip_gradients(bool want_norm) {
    const double max_norm = config().optim.clip_grad_norm;
    if (max_norm > 0) return torch::nn::utils::clip_grad_norm_(parameters, max_norm);
    if (!want_norm) return std::nullopt;
    double squares = 0;
    for (const auto& p : parameters) {
      if (p.grad().defined()) squares += p.grad().detach().pow(2).sum().item<double>();
    }
    return std::sqrt(squares);
  }

  std::vector<at::Tensor> gradients() const {
    std::vector<at::Tensor> out;
    for (const auto& p : parameters) out.push_back(p.grad());
    return out;
  }

  void apply_schedule() {
    const double lr = lr_at(config().optim, peak_lr, step, total_steps);
    for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
  }

  void resume();
  void check_config_unchanged(const ckpt::CheckpointReader& reader) const;
  EpochPlan plan_samples() const;
  void warn_of_split_reads(const data::SamplerOptions& options) const;
  EpochPlan plan_windows() const;
  void train_epoch(std::int64_t epoch, const EpochPlan& plan, std::int64_t cursor);
  // What the loader's threads do for a step: gather (and augment) its samples or windows.
  data::Loader::ReadBatch batch_reader(std::int64_t epoch) const;
  // The model's input: normalized pixels or arrays; token ids as they are.
  at::Tensor model_input(const at::Tensor& input) const {
    return setup.train_split ? setup.train_split->normalize(input) : input;
  }
  void log_progress(std::int64_t epoch, std::int64_t step_in_epoch, std::int64_t steps_per_epoch,
                    at::Tensor& loss_sum, double& loss_samples, double& real_samples, Timer& interval,
                    IntervalTimes& times);
  // Collective: "the averaged gradient of 'fc1.weight' holds inf or NaN (the loss was not finite
  // on rank(s) 1)" for the step being taken; `rank_loss` is this rank's loss of the step.
  std::string describe_nonfinite(const at::Tensor& rank_loss);
  // Collective: after a non-finite step that ends the run (train.nonfinite, train.max_skipped),
  // checkpoints the last good state (the step was not applied) and says why in `failure`.
  void stop_on_nonfinite(const at::Tensor& rank_loss);
  std::optional<EvalResult> evaluate_epoch(std::int64_t epoch);
  // Collective: a checkpoint of the current position (epoch_now, cursor_now); `best`: also
  // named by checkpoints/best (ckpt.keep_best), which pruning spares. With ckpt.async rank 0
  // returns once a host copy is handed to the background writer.
  std::string save_checkpoint(bool best = false);
  // Rank 0, with ckpt.async: waits for the write in flight, if any, as writing (timed by
  // ckpt.write_timeout_s), while the other ranks wait for rank 0 in the control plane (untimed).
  void wait_for_background_write() {
    if (bootstrap.world_rank() != 0) return;
    const activity::Scope writing(activity::Kind::kCheckpoint);
    checkpoint_writer.wait();
  }
  // Collective, at the end of a run: with ckpt.async, waits until rank 0's last write is on disk.
  void finish_checkpoint_writes() {
    if (!config().ckpt.async) return;
    wait_for_background_write();
    const activity::Scope waiting(activity::Kind::kCheckpointWait);
    bootstrap.barrier();
  }
};

}  // namespace hpctrain::train
