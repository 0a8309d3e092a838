#include "hpctrain/train/trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iterator>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/activity.h"
#include "hpctrain/core/background_job.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/stop_signals.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/core/version.h"
#include "hpctrain/data/augment.h"
#include "hpctrain/data/distributed_sampler.h"
#include "hpctrain/data/loader.h"
#include "hpctrain/data/token_windows.h"
#include "hpctrain/ddp/grad_sync.h"
#include "hpctrain/model/batch_norm.h"
#include "hpctrain/model/flops.h"
#include "hpctrain/model/model.h"
#include "hpctrain/train/autocast.h"
#include "hpctrain/train/device.h"
#include "hpctrain/train/global_batch.h"
#include "hpctrain/train/loss_scaler.h"
#include "hpctrain/train/lr_schedule.h"
#include "hpctrain/train/metrics_writer.h"
#include "hpctrain/train/mfu.h"
#include "hpctrain/train/nonfinite.h"
#include "hpctrain/train/optimizer.h"
#include "hpctrain/train/resume_policy.h"
#include "hpctrain/train/resume_state.h"
#include "hpctrain/train/step_loss.h"
#include "hpctrain/train/step_timing.h"
#include "hpctrain/train/train_state.h"

namespace hpctrain::train {
namespace {

std::vector<at::Tensor> buffers_of(torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  for (auto& b : module.buffers()) out.push_back(b);
  return out;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

// Writes the checkpoint, names it `best` if asked, prunes to `keep_last`, and logs what it cost.
// `blocked_s`: how long training waited for a background write (ckpt.async); < 0 when training
// waited for the whole write.
std::string commit_checkpoint(const std::string& dir, const ckpt::Checkpoint& checkpoint, bool best,
                              std::int64_t keep_last, double blocked_s) {
  activity::fault_point("checkpoint-write");
  const Timer timer;
  const std::string path = ckpt::write_checkpoint(dir, checkpoint);
  const double seconds = timer.elapsed_s();
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
  return path;
}

// "8.48 M", "1.21 G": a FLOP count for the log.
std::string flop_text(double flops) {
  const char* const prefixes[] = {"", "k", "M", "G", "T", "P"};
  size_t i = 0;
  while (flops >= 1000 && i + 1 < std::size(prefixes)) {
    flops /= 1000;
    ++i;
  }
  return fmt::format("{:.3g} {}", flops, prefixes[i]);
}

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

}  // namespace

ckpt::NamedTensors model_state(model::Model& model) {
  ckpt::NamedTensors out;
  for (auto& p : model.module().named_parameters()) out.emplace_back(p.key(), p.value());
  for (auto& b : model.module().named_buffers()) out.emplace_back(b.key(), b.value());
  for (const auto& tied : model.tied_parameters()) out.emplace_back(tied.name, tied.tensor);
  return out;
}

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
  at::Tensor forward(const at::Tensor& input) {
    if (flops_counted) return net().forward(input);
    flops_counted = true;
    at::Tensor logits;
    const double flops = model::count_flops([&] { logits = net().forward(input); });
    if (flops <= 0) {
      log::warn("no matrix product or convolution was seen in the model's forward pass; the metrics leave out "
                "model_tflops and mfu");
      return logits;
    }
    training_flops = model::training_flops_per_sample(flops / static_cast<double>(input.size(0)));
    const std::string gpu = device.is_cuda() ? comm::gpu_name(device.index()) : "";
    peak_flops = resolve_peak_flops(config().train.peak_tflops, gpu, config().train.precision, config().train.tf32);
    const std::string unit = setup.language_model() ? "window" : "sample";
    log::info("model arithmetic: {}FLOP per {} forward, {}FLOP per {} trained (3x forward); MFU {}",
              flop_text(*training_flops / 3), unit, flop_text(*training_flops), unit,
              peak_flops ? fmt::format("against {:g} TFLOP/s per device ({})", peak_flops->tflops, peak_flops->source)
                         : std::string("not measured: set train.peak_tflops to one device's peak"));
    return logits;
  }

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

Trainer::Trainer(TrainingSetup setup, comm::Bootstrap& bootstrap, RunDirectory run_dir)
    : state_(std::make_unique<State>(std::move(setup), bootstrap, std::move(run_dir))) {
  State& s = *state_;
  s.read_train_split_collectively();
  torch::nn::Module& module = s.net().module();
  module.to(s.device);
  s.comm = comm::make_communicator(s.config().dist.backend, bootstrap, s.setup.use_cuda,
                                   s.device.is_cuda() ? s.device.index() : 0,
                                   s.config().dist.timeout_s);
  std::vector<at::Tensor> everything = module.parameters();
  s.buffers = buffers_of(module);
  for (const auto& b : s.buffers) s.buffers_before_step.push_back(b.detach().clone());
  everything.insert(everything.end(), s.buffers.begin(), s.buffers.end());
  ddp::broadcast_tensors(*s.comm, everything, 0);
  // Only parameters that learn get gradients averaged, clipped and stepped: a frozen one (a
  // TorchScript module's requires_grad=False) stays as it is, as in PyTorch, at any world size.
  NamedParameters named;
  for (const auto& p : module.named_parameters()) {
    if (p.value().requires_grad()) named.emplace_back(p.key(), p.value());
  }
  std::vector<at::Tensor> parameters;
  for (const auto& [name, p] : named) parameters.push_back(p);
  s.parameters = parameters;
  for (const auto& [name, p] : named) s.gradient_names.push_back(name);
  ddp::GradSyncOptions sync_options;
  sync_options.bucket_bytes = static_cast<std::int64_t>(s.config().dist.bucket_mb * (1 << 20));
  sync_options.overlap = s.config().dist.overlap;
  const std::string& compression = s.config().dist.grad_compression;
  if (compression != "none") sync_options.wire_dtype = compression == "fp16" ? at::kHalf : at::kBFloat16;
  s.grad_sync = std::make_unique<ddp::GradSync>(*s.comm, parameters, sync_options);
  s.synchronize_batch_norm();
  s.optimizer = make_optimizer(s.config().optim, named);
  const config::TrainConfig& train = s.config().train;
  if (uses_loss_scaling(train)) {
    LossScalerOptions scaling;
    scaling.initial_scale = train.loss_scale_init;
    s.loss_scaler.emplace(scaling);
  }
  s.parameter_names = names_in_optimizer_order(*s.optimizer, named);
  // Dropout masks differ per rank (as separate processes would in PyTorch DDP), reproducibly.
  torch::manual_seed(static_cast<std::uint64_t>(s.config().train.seed) * 1000003ULL +
                     static_cast<std::uint64_t>(bootstrap.world_rank()) + 1);
  std::int64_t count = 0;
  for (const auto& p : parameters) count += p.numel();
  const size_t frozen = module.parameters().size() - parameters.size();
  log::info("model {}: {} parameters in {} tensors{}, {} buffers; device {}, backend {}, {} rank(s)",
            s.config().model.name, count, parameters.size(),
            frozen > 0 ? fmt::format(" ({} frozen tensors besides)", frozen) : "", s.buffers.size(), s.device.str(),
            s.comm->backend(), s.comm->size());
  for (const auto& tied : s.net().tied_parameters()) {
    log::info("tied weights: '{}' is '{}' (trained once, stored under both names)", tied.name, tied.same_as);
  }
}

Trainer::~Trainer() = default;

EpochPlan Trainer::State::plan_samples() const {
  const config::TrainConfig& train = config().train;
  data::SamplerOptions options;
  options.dataset_size = setup.train_split->size();
  options.world_size = comm->size();
  options.rank = comm->rank();
  options.batch_size = train.batch_size;
  options.seed = static_cast<std::uint64_t>(train.seed);
  options.shuffle = train.shuffle;
  options.drop_last = train.drop_last;
  data::set_shuffle_window(setup.train_split->manifest(), config().data.train_split,
                           config().data.shuffle_window_mb, options);
  data::check_shuffle_window(*setup.train_split, options);
  if (train.shuffle && !options.block_starts.empty()) {
    log::info("shuffling by chunks (data.shuffle_window_mb={}): {} blocks, the samples of {} at a time mixed",
              config().data.shuffle_window_mb, options.block_starts.size(), options.window_blocks);
  } else if (train.shuffle && !setup.train_split->caches_blocks()) {
    log::warn("split '{}' is larger than data.cache_mb={}: a global shuffle reads about one ~1 MiB "
              "chunk per sample; set data.shuffle_window_mb (e.g. {}) to shuffle by chunks, or raise "
              "data.cache_mb", config().data.train_split, config().data.cache_mb,
              std::max<std::int64_t>(1, config().data.cache_mb / 4));
  }
  EpochPlan plan;
  plan.samples.emplace(options);
  return plan;
}

EpochPlan Trainer::State::plan_windows() const {
  if (!config().train.shuffle) {
    log::warn("train.shuffle=false does not apply to a token stream: its windows start at random offsets "
              "drawn from train.seed");
  }
  if (config().data.io == "mpio") {
    log::warn("data.io=mpio reads sample splits; token stream '{}' is read by every rank itself",
              config().data.train_split);
  }
  data::TokenWindowOptions options;
  options.stream_tokens = setup.train_tokens->size();
  options.block_size = setup.train_tokens->block_size();
  options.world_size = comm->size();
  options.rank = comm->rank();
  options.batch_size = config().train.batch_size;
  options.seed = static_cast<std::uint64_t>(config().train.seed);
  EpochPlan plan;
  plan.windows.emplace(options);
  return plan;
}

data::Loader::ReadBatch Trainer::State::batch_reader(std::int64_t epoch) const {
  // On a GPU, batches are assembled in pinned memory so that their copy to the device is
  // asynchronous and overlaps the previous step's kernels.
  const bool pinned = device.is_cuda();
  if (setup.train_tokens) {
    return [stream = *setup.train_tokens, pinned](const std::vector<std::int64_t>& offsets) {
      return stream.gather(offsets, pinned);
    };
  }
  data::AugmentOptions augment;
  augment.crop_padding = config().data.random_crop;
  augment.flip = config().data.random_flip;
  augment.seed = static_cast<std::uint64_t>(config().train.seed);
  return [split = *setup.train_split, pinned, augment, epoch](const std::vector<std::int64_t>& indices) {
    data::Batch batch = split.gather(indices, pinned);
    data::augment_in_place(batch.input, indices, epoch, augment);
    return batch;
  };
}

void Trainer::State::train_epoch(std::int64_t epoch, const EpochPlan& plan, std::int64_t cursor) {
  net().module().train();
  // The rest of the epoch's plan up front, so the loader can read ahead of the loop.
  const std::vector<data::SamplerStep> plans = plan.steps(epoch, cursor);
  const std::string& precision = config().train.precision;
  const std::optional<at::ScalarType> forward_dtype = autocast_dtype(precision);
  // An optimizer step is `accum` sampler steps (micro-batches); the epoch's last may have fewer.
  const auto micro_batches = static_cast<std::int64_t>(plans.size());
  const std::int64_t steps_per_epoch = (micro_batches + accum - 1) / accum;
  std::vector<std::vector<std::int64_t>> step_indices;
  for (const auto& step_plan : plans) step_indices.push_back(step_plan.indices);
  data::Loader loader(batch_reader(epoch), std::move(step_indices),
                      {static_cast<int>(config().data.prefetch), static_cast<int>(config().data.loader_threads)});

  Timer interval;
  IntervalTimes times;
  // Over this rank's real samples since the last log line. The loss stays on the device, so a
  // step never waits for the GPU to report it.
  at::Tensor loss_sum = torch::zeros({}, torch::dtype(torch::kFloat64).device(device));
  double loss_samples = 0.0;  // of the steps applied (a skipped step's loss may be NaN)
  double real_samples = 0.0;  // of every step, for the rate
  for (std::int64_t i = 0; i < steps_per_epoch && !step_limit_reached(); ++i) {
    const std::int64_t first = i * accum;
    const std::int64_t count = std::min(accum, micro_batches - first);
    // Note [Masked mean]: every micro-batch's loss is divided by the real samples of the whole
    // step (all ranks, all micro-batches), so the accumulated, averaged gradient is the mean over
    // the step's real samples, as one process on the whole global batch would compute it.
    std::int64_t step_real = 0;
    for (std::int64_t j = first; j < first + count; ++j) step_real += plans[static_cast<size_t>(j)].global_real;
    at::Tensor step_loss_sum = torch::zeros({}, loss_sum.options());  // this rank's
    double step_samples = 0.0;

    const activity::Scope stepping(activity::Kind::kStep);
    sync_buffers();
    // The forward pass updates BatchNorm's running statistics; a skipped step must not, so a NaN
    // in its activations cannot reach them.
    for (size_t b = 0; b < buffers.size(); ++b) buffers_before_step[b].copy_(buffers[b]);
    optimizer->zero_grad();
    for (std::int64_t j = first; j < first + count; ++j) {
      const data::SamplerStep& micro = plans[static_cast<size_t>(j)];
      const Timer waiting;
      const data::Batch batch = [&] {
        const activity::Scope loading(activity::Kind::kLoader);
        return loader.next();
      }();
      times.data_s += waiting.elapsed_s();
      const at::Tensor weights = torch::tensor(micro.weights).to(device);
      at::Tensor logits;
      {
        const AutocastScope autocast(device.type(), forward_dtype);
        logits = forward(model_input(batch.input.to(device, /*non_blocking=*/true)));
      }
      const at::Tensor losses = per_sample_loss(logits, batch.target.to(device, /*non_blocking=*/true),
                                                config().train.label_smoothing);
      grad_sync->begin_backward(/*last_micro_batch=*/j + 1 == first + count);
      const at::Tensor loss = step_loss(losses, weights, comm->size(), step_real);
      (loss_scaler ? loss * loss_scaler->scale() : loss).backward();
      step_loss_sum += (losses.detach() * weights).sum();
      for (const float w : micro.weights) step_samples += w;
    }
    const Timer reducing;
    grad_sync->average_gradients();
    times.comm_s += reducing.elapsed_s();
    ++times.steps;
    const bool last = i + 1 == steps_per_epoch ||
                      (config().train.max_steps > 0 && step + 1 >= config().train.max_steps);
    const bool log_now = (step + 1) % config().log.every_steps == 0 || last;
    // A step whose averaged gradients hold inf or NaN (equal on every rank, so every rank decides
    // alike) is skipped, or ends the run (train.nonfinite); with loss scaling it is an overflow.
    const bool finite = loss_scaler ? loss_scaler->unscale(gradients()) : all_finite(gradients());
    if (!finite) {
      for (size_t b = 0; b < buffers.size(); ++b) buffers[b].copy_(buffers_before_step[b]);
    }
    if (skipped.after_step(finite) == NonfiniteAction::kAbort) {
      stop_on_nonfinite(step_loss_sum);
      return;
    }
    if (loss_scaler) loss_scaler->update(finite);
    if (finite) {
      loss_sum += step_loss_sum;  // a skipped step's loss may be NaN: the interval's mean leaves it out
      loss_samples += step_samples;
    } else if (!loss_scaler) {  // with loss scaling, overflows are routine
      const std::string what = describe_nonfinite(step_loss_sum);  // collective
      if (bootstrap.world_rank() == 0) {
        log::warn("step {}: skipped on every rank: {} ({} in a row; train.max_skipped={})", step + 1, what,
                  skipped.in_a_row(), config().train.max_skipped);
      }
    }
    real_samples += step_samples;
    grad_norm = finite ? clip_gradients(log_now) : std::nullopt;
    apply_schedule();
    if (finite) optimizer->step();
    ++step;
    activity::set_step(step);
    if (!first_step_noted) note_first_step();
    check_replicas();

    if (log_now) log_progress(epoch, i + 1, steps_per_epoch, loss_sum, loss_samples, real_samples, interval, times);
    epoch_now = epoch;
    cursor_now = plans[static_cast<size_t>(first + count - 1)].next_cursor;
    checkpoint_writer.rethrow_if_failed();  // a background write that failed ends the run now
    const Boundary boundary = at_step_boundary();
    if (boundary.stop) {
      stopped = true;
      save_checkpoint();
      return;
    }
    const std::int64_t every = config().ckpt.every_steps;
    if (boundary.checkpoint_due || (every > 0 && step % every == 0)) save_checkpoint();
    // train.eval_every, except at the epoch's end, where run() evaluates anyway.
    const std::int64_t eval_every = config().train.eval_every;
    if (eval_every > 0 && step % eval_every == 0 && !last) {
      evaluate_epoch(epoch);
      net().module().train();
      if (config().ckpt.keep_best && improved) save_checkpoint(/*best=*/true);
    }
  }
}

void Trainer::State::log_progress(std::int64_t epoch, std::int64_t step_in_epoch,
                                  std::int64_t steps_per_epoch, at::Tensor& loss_sum, double& loss_samples,
                                  double& real_samples, Timer& interval, IntervalTimes& times) {
  // One small allreduce per log interval: the loss and throughput of the whole job.
  const std::vector<double> totals =
      ddp::sum_over_ranks(*comm, {loss_sum.item<double>(), loss_samples, real_samples}, device);
  // NaN when every step of the interval was skipped: the log says "nan", the metrics leave it out.
  const double mean_loss = totals[1] > 0 ? totals[0] / totals[1] : std::nan("");
  const double wall_s = interval.elapsed_s();
  const double samples_per_s = totals[2] / wall_s;
  const double lr = current_lr(*optimizer);
  // Rank 0's clock; the ETA assumes the rest of the run goes at this interval's pace. Steps left:
  // this epoch's, then whole epochs at this world size, up to train.max_steps.
  const StepBreakdown per_step = breakdown(times, wall_s);
  std::int64_t steps_left =
      steps_per_epoch - step_in_epoch + (config().train.epochs - epoch - 1) * steps_per_full_epoch;
  if (config().train.max_steps > 0) steps_left = std::min(steps_left, config().train.max_steps - step);
  const double eta_s = static_cast<double>(std::max<std::int64_t>(0, steps_left)) * per_step.step_ms / 1e3;
  // A language model's samples are windows of gpt_block_size tokens, each token a prediction.
  const double tokens_per_s = setup.language_model() ? samples_per_s * static_cast<double>(config().model.gpt_block_size) : 0;
  std::string rate = setup.language_model() ? fmt::format("{:.0f} tokens/s", tokens_per_s)
                                            : fmt::format("{:.0f} samples/s", samples_per_s);
  const double tflops = training_flops ? model_tflops(samples_per_s, *training_flops) : 0.0;
  const bool with_mfu = training_flops && peak_flops;
  const double utilization = with_mfu ? mfu(tflops, comm->size(), peak_flops->tflops) : 0.0;
  if (with_mfu) rate += fmt::format(" (MFU {:.1f} %)", 100 * utilization);
  // No norm after a skipped step: its gradients were not finite.
  const std::string norm = grad_norm ? fmt::format("{:.3g}", *grad_norm) : std::string("-");
  log::info("epoch {} step {} ({}/{}) loss {:.4f} lr {:.3g} grad_norm {} {}, {:.1f} ms/step "
            "(data {:.1f}, comm {:.1f}), ETA {}",
            epoch + 1, step, step_in_epoch, steps_per_epoch, mean_loss, lr, norm, rate,
            per_step.step_ms, per_step.data_ms, per_step.comm_ms, format_duration(eta_s));
  nlohmann::json record = {{"step", step},
                           {"epoch", epoch + 1},
                           {"lr", lr},
                           {"samples_per_s", samples_per_s},
                           {"step_ms", per_step.step_ms},
                           {"data_ms", per_step.data_ms},
                           {"comm_ms", per_step.comm_ms},
                           {"compute_ms", per_step.compute_ms},
                           {"eta_s", eta_s},
                           {"peak_rss_mb", static_cast<double>(sys::peak_rss_bytes()) / (1 << 20)}};
  if (std::isfinite(mean_loss)) record["loss"] = mean_loss;
  if (grad_norm) record["grad_norm"] = *grad_norm;
  if (setup.language_model()) record["tokens_per_s"] = tokens_per_s;
  if (training_flops) record["model_tflops"] = tflops;
  if (with_mfu) record["mfu"] = utilization;
  if (device.is_cuda()) {
    const std::int64_t in_use = comm::gpu_memory_in_use_bytes(device.index());
    if (in_use >= 0) record["gpu_mem_mb"] = static_cast<double>(in_use) / (1 << 20);
  }
  if (loss_scaler) record["loss_scale"] = loss_scaler->scale();
  record["skipped_steps"] = skipped.total();
  metrics.write(record);
  loss_sum.zero_();
  loss_samples = 0.0;
  real_samples = 0.0;
  interval.reset();
  times.reset();
}

std::string Trainer::State::describe_nonfinite(const at::Tensor& rank_loss) {
  std::vector<double> loss_not_finite(static_cast<size_t>(comm->size()), 0.0);
  loss_not_finite[static_cast<size_t>(comm->rank())] = std::isfinite(rank_loss.item<double>()) ? 0.0 : 1.0;
  loss_not_finite = ddp::sum_over_ranks(*comm, loss_not_finite, device);
  std::string ranks;
  for (size_t r = 0; r < loss_not_finite.size(); ++r) {
    if (loss_not_finite[r] > 0) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  }
  const std::int64_t first = first_nonfinite(gradients());
  const std::string tensor = first >= 0 ? "'" + gradient_names[static_cast<size_t>(first)] + "'" : "a parameter";
  return "the averaged gradient of " + tensor + " holds inf or NaN (" +
         (ranks.empty() ? std::string("every rank's loss was finite: the backward pass overflowed")
                        : "the loss was not finite on rank(s) " + ranks) +
         ")";
}

void Trainer::State::stop_on_nonfinite(const at::Tensor& rank_loss) {
  const std::string what = describe_nonfinite(rank_loss);
  // The step was not applied, and step, epoch_now and cursor_now still say where it began.
  const bool on_disk = written_step == step && written_epoch == epoch_now && written_cursor == cursor_now;
  const std::string path = on_disk ? last_checkpoint : save_checkpoint();
  finish_checkpoint_writes();
  const config::TrainConfig& train = config().train;
  const std::string rule =
      train.nonfinite == "abort"
          ? std::string("train.nonfinite=abort stops at the first such step")
          : fmt::format("{} step(s) in a row would be skipped, more than train.max_skipped={} (the weights "
                        "are those after step {})",
                        skipped.in_a_row() + 1, train.max_skipped, step - skipped.in_a_row());
  failure = fmt::format("step {}: {}; {}; checkpoint {} holds the last good state (epoch {}, sampler cursor {}): "
                        "lower optim.lr, set optim.clip_grad_norm, or check the step's samples (hpctrain data "
                        "order ... --epoch {} --from-cursor {})",
                        step + 1, what, rule, path, epoch_now + 1, cursor_now, epoch_now + 1, cursor_now);
}

std::optional<EvalResult> Trainer::State::evaluate_epoch(std::int64_t epoch) {
  if (!setup.eval_split && !setup.eval_tokens) return std::nullopt;
  const activity::Scope evaluating(activity::Kind::kEvaluation);
  sync_buffers();
  const std::int64_t batch = config().train.eval_batch_size;
  const EvalResult result = setup.eval_tokens ? evaluate(net(), *setup.eval_tokens, *comm, batch, device)
                                              : evaluate(net(), *setup.eval_split, *comm, batch, device);
  nlohmann::json record = {{"epoch", epoch + 1}, {"step", step}, {"test_loss", result.loss},
                           {"test_acc", result.accuracy}};
  if (result.language_model()) {
    log::info("epoch {} step {} eval on {} ({} tokens): test_loss {:.4f} test_ppl {:.2f} test_acc {:.4f} (next token)",
              epoch + 1, step, config().data.eval_split, result.tokens, result.loss, result.perplexity(),
              result.accuracy);
    record["test_ppl"] = result.perplexity();
  } else {
    log::info("epoch {} step {} eval on {} ({} samples): test_loss {:.4f} test_acc {:.4f}", epoch + 1, step,
              config().data.eval_split, result.samples, result.loss, result.accuracy);
  }
  metrics.write(record);
  if (result.language_model()) {
    improved = !best_test_loss || std::isnan(*best_test_loss) || result.loss < *best_test_loss;
    if (improved) best_test_loss = result.loss;
  } else {
    improved = !best_test_acc || result.accuracy > *best_test_acc;
    if (improved) best_test_acc = result.accuracy;
  }
  return result;
}

std::string Trainer::State::save_checkpoint(bool best) {
  // Waiting for the other ranks has no limit of its own (a rank that dies or freezes is found by
  // the rank watch); rank 0's write has one, ckpt.write_timeout_s (Note [Rank watch]).
  const activity::Scope waiting(activity::Kind::kCheckpointWait);
  const Timer blocked;
  // With ckpt.async, rank 0 first waits for its previous write while the others wait for it in
  // the gathering, on the control plane, where nothing but rank 0's own limit times them out.
  if (config().ckpt.async) wait_for_background_write();
  // Every rank's generators, gathered on the control plane (no collective is in flight here).
  ckpt::NamedTensors generators;
  for (const auto& [name, state] : rng_state(device)) {
    const at::Tensor bytes = state.to(at::kCPU).contiguous();
    const auto all = bootstrap.allgather_string(
        std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.nbytes())));
    for (size_t r = 0; r < all.size(); ++r) {
      at::Tensor copy = at::empty({static_cast<std::int64_t>(all[r].size())}, at::kByte);
      std::memcpy(copy.data_ptr(), all[r].data(), all[r].size());
      generators.emplace_back("rank-" + std::to_string(r) + "/" + name, copy);
    }
  }
  sync_buffers();
  std::string path;
  if (bootstrap.world_rank() == 0) {
    const activity::Scope writing(activity::Kind::kCheckpoint);
    ckpt::Checkpoint checkpoint;
    ckpt::CheckpointMeta& meta = checkpoint.meta;
    meta.hpctrain_version = version();
    meta.step = step;
    meta.epoch = epoch_now;
    meta.cursor = cursor_now;
    meta.world_size = comm->size();
    meta.model_name = config().model.name;
    meta.config_text = config::to_ini(config());
    meta.created = utc_now();
    checkpoint.groups["model"] = model_state(net());
    checkpoint.groups["optim"] = optimizer_state(*optimizer, parameter_names);
    checkpoint.groups["sched"] = {{"step", torch::full({}, step, torch::kLong)}};
    for (auto& entry : skipped.state()) checkpoint.groups["sched"].push_back(std::move(entry));
    checkpoint.groups["rng"] = std::move(generators);
    ckpt::NamedTensors bests;
    if (best_test_acc) bests.emplace_back("best_test_acc", torch::full({}, *best_test_acc, torch::kDouble));
    if (best_test_loss) bests.emplace_back("best_test_loss", torch::full({}, *best_test_loss, torch::kDouble));
    if (!bests.empty()) checkpoint.groups["metrics"] = std::move(bests);
    if (loss_scaler) checkpoint.groups["loss_scaler"] = loss_scaler->state();
    const std::string dir = run_dir.checkpoints_dir();
    const std::int64_t keep_last = config().ckpt.keep_last;
    if (config().ckpt.async) {
      // Shared: std::function needs a copyable job.
      auto copy = std::make_shared<const ckpt::Checkpoint>(ckpt::host_copy(checkpoint));
      path = ckpt::checkpoint_path(dir, step);
      checkpoint_writer.start([copy, dir, keep_last, best, waited = blocked.elapsed_s()] {
        commit_checkpoint(dir, *copy, best, keep_last, waited);
      });
    } else {
      path = commit_checkpoint(dir, checkpoint, best, keep_last, /*blocked_s=*/-1);
    }
  }
  // No rank leaves before the checkpoint is on disk (with ckpt.async: before the run ends). The
  // control plane's barrier has no timeout: a large write may take longer than dist.timeout_s,
  // and a rank that dies ends the job anyway.
  if (!config().ckpt.async) bootstrap.barrier();
  last_checkpoint = path;
  written_step = step;
  written_epoch = epoch_now;
  written_cursor = cursor_now;
  since_checkpoint.reset();
  return path;
}

void Trainer::State::check_config_unchanged(const ckpt::CheckpointReader& reader) const {
  const std::string changes = resume_config_changes(reader.meta().config_text, config::to_ini(config()));
  if (changes.empty()) return;
  if (config().ckpt.allow_config_change) {
    log::warn("resuming with a changed config ({}), as ckpt.allow_config_change=true", changes);
    return;
  }
  throw ConfigError("the config differs from that of checkpoint " + reader.path() + ": " + changes +
                    "; resume with the checkpoint's values (h5dump -a config shows them), set "
                    "--ckpt.resume=none to start fresh, or --ckpt.allow_config_change=true");
}

void Trainer::State::resume() {
  std::string chosen;
  if (bootstrap.world_rank() == 0) chosen = choose_checkpoint(config().ckpt.resume, run_dir.checkpoints_dir());
  std::vector<std::uint8_t> bytes(chosen.begin(), chosen.end());
  bootstrap.broadcast_bytes(bytes, 0);
  chosen.assign(bytes.begin(), bytes.end());
  if (chosen.empty()) {
    log::info("starting fresh (ckpt.resume={}; no checkpoint to continue from)", config().ckpt.resume);
    return;
  }
  const ckpt::CheckpointReader reader(chosen);
  const ckpt::CheckpointMeta& meta = reader.meta();
  check_config_unchanged(reader);
  const ResumedState resumed = read_resume_state(
      reader, ResumeTargets{net(), *optimizer, parameter_names, skipped, loss_scaler ? &*loss_scaler : nullptr,
                            device, bootstrap.world_rank(), comm->size()});
  step = resumed.step;
  start_epoch = resumed.epoch;
  start_cursor = resumed.cursor;
  best_test_acc = resumed.best_test_acc;
  best_test_loss = resumed.best_test_loss;
  if (loss_scaler && !resumed.loss_scale_restored) {
    log::warn("checkpoint {} holds no loss scale (written without loss scaling); starting from "
              "train.loss_scale_init={}", chosen, config().train.loss_scale_init);
  }
  if (!resumed.generators_restored) {
    // Another world size: no rank's generators carry over; new ones, distinct per rank and step.
    torch::manual_seed(static_cast<std::uint64_t>(config().train.seed) * 1000003ULL +
                       static_cast<std::uint64_t>(bootstrap.world_rank()) + 1 +
                       static_cast<std::uint64_t>(step) * 7919ULL);
  }
  log::info("resumed from {}: step {}, epoch {}, sampler cursor {} (written by {} rank(s))", chosen,
            step, start_epoch + 1, start_cursor, meta.world_size);
  if (meta.world_size != comm->size() && bootstrap.world_rank() == 0) {
    const std::string batch =
        config().train.global_batch > 0
            ? "the global batch stays " + std::to_string(config().train.global_batch) + " (train.global_batch; " +
                  std::to_string(accum) + " micro-batch(es) per step now)"
            : "the global batch becomes " + std::to_string(comm->size() * config().train.batch_size * accum) +
                  " (set train.global_batch to keep it)";
    const std::string lr = config().optim.lr_scaling == "none"
                               ? "the learning rate is not rescaled (optim.lr_scaling=none)"
                               : "the learning rate peaks at " + std::to_string(peak_lr) + " (optim.lr_scaling=" +
                                     config().optim.lr_scaling + ")";
    log::warn("the checkpoint was written by {} rank(s), this run has {}: epoch {} continues with the "
              "samples not yet seen (from global cursor {}); {}; {}; dropout draws differ from an "
              "uninterrupted run",
              meta.world_size, comm->size(), start_epoch + 1, start_cursor, batch, lr);
  }
}

TrainSummary Trainer::run() {
  State& s = *state_;
  const config::TrainConfig& train = s.config().train;
  HT_CHECK(s.setup.train_split || s.setup.train_tokens, "Trainer needs a training split");
  const EpochPlan plan = s.setup.train_split ? s.plan_samples() : s.plan_windows();
  s.accum = accumulation_steps(train, s.comm->size());
  const std::int64_t global_batch = train.batch_size * s.accum * s.comm->size();
  s.peak_lr = peak_lr(s.config().optim, global_batch);
  const std::int64_t steps_per_epoch = (plan.steps_from(0) + s.accum - 1) / s.accum;
  const std::string what =
      plan.samples ? fmt::format("{} samples", plan.samples->options().dataset_size)
                   : fmt::format("a stream of {} tokens ({} windows of {} per epoch, at random offsets)",
                                 plan.windows->options().stream_tokens, plan.windows->windows_per_epoch(),
                                 plan.windows->options().block_size + 1);
  log::info("training on {}: {} steps per epoch, global batch {} ({} ranks x {} "
            "micro-batch(es) x {}){}; gradients in {} bucket(s), overlap {}, compression {}",
            what, steps_per_epoch, global_batch, s.comm->size(), s.accum, train.batch_size,
            plan.samples && train.drop_last ? ", last partial batch dropped" : "", s.grad_sync->bucket_count(),
            s.config().dist.overlap ? "on" : "off", s.config().dist.grad_compression);
  const config::OptimConfig& optim = s.config().optim;
  if (optim.lr_scaling != "none") {
    log::info("learning rate {:.6g}: optim.lr {:.6g} x {} scaling for global batch {} (optim.base_batch {})",
              s.peak_lr, optim.lr, optim.lr_scaling, global_batch, optim.base_batch);
  }
  s.total_steps = s.config().optim.decay_steps > 0 ? s.config().optim.decay_steps
                  : train.max_steps > 0             ? train.max_steps
                                                    : train.epochs * steps_per_epoch;
  s.steps_per_full_epoch = steps_per_epoch;
  s.resume();
  activity::set_step(s.step);
  activity::enter(activity::Kind::kStep);  // between steps too, until the run ends
  if (s.bootstrap.world_rank() == 0) s.run_dir.write_config(config::to_ini(s.config()));
  s.epoch_now = s.start_epoch;
  s.cursor_now = s.start_cursor;
  TrainSummary summary;
  for (std::int64_t epoch = s.start_epoch; epoch < train.epochs && !s.step_limit_reached(); ++epoch) {
    s.train_epoch(epoch, plan, epoch == s.start_epoch ? s.start_cursor : 0);
    if (s.stopped || !s.failure.empty()) break;
    summary.last_eval = s.evaluate_epoch(epoch);  // also after an epoch cut short by max_steps
    if (plan.steps_from(s.cursor_now) == 0) {  // the epoch is complete: a resume starts the next
      s.epoch_now = epoch + 1;
      s.cursor_now = 0;
    }
    if (s.config().ckpt.keep_best && summary.last_eval && s.improved) s.save_checkpoint(/*best=*/true);
  }
  activity::enter(activity::Kind::kFinishing);  // and so it stays: the run ends
  summary.steps = s.step;
  summary.stopped = s.stopped;
  summary.failure = s.failure;
  if (s.stopped || !s.failure.empty()) {
    summary.checkpoint = s.last_checkpoint;
  } else if (s.config().ckpt.save_final) {
    // A periodic checkpoint of this very position may have been written a moment ago.
    const bool written = s.written_step == s.step && s.written_epoch == s.epoch_now && s.written_cursor == s.cursor_now;
    summary.checkpoint = written ? s.last_checkpoint : s.save_checkpoint();
  }
  s.finish_checkpoint_writes();
  return summary;
}

}  // namespace hpctrain::train
