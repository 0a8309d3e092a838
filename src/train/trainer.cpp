// Trainer: set-up (devices, communicator, gradient engine, optimizer), the epoch loop and run().
// Progress and evaluation are in trainer_progress.cpp, checkpoints and resume in
// trainer_checkpoint.cpp; the state they share in trainer_state.h.
#include "hpctrain/train/trainer.h"

#include <torch/torch.h>

#include <algorithm>

#include "hpctrain/config/parser.h"
#include "hpctrain/data/augment.h"
#include "hpctrain/train/autocast.h"
#include "hpctrain/train/global_batch.h"
#include "hpctrain/train/optimizer.h"
#include "hpctrain/train/step_loss.h"
#include "trainer_state.h"

namespace hpctrain::train {
namespace {

std::vector<at::Tensor> buffers_of(torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  for (auto& b : module.buffers()) out.push_back(b);
  return out;
}

}  // namespace

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
  // On a GPU, say which float32 math runs (train.tf32), since it changes results slightly.
  const std::string math = !s.device.is_cuda() ? ""
                           : s.config().train.tf32 ? " (float32 products on TF32 tensor cores: train.tf32)"
                                                   : " (full float32: train.tf32=false)";
  log::info("model {}: {} parameters in {} tensors{}, {} buffers; device {}{}, backend {}, {} rank(s)",
            s.config().model.name, count, parameters.size(),
            frozen > 0 ? fmt::format(" ({} frozen tensors besides)", frozen) : "", s.buffers.size(), s.device.str(),
            math, s.comm->backend(), s.comm->size());
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
  warn_of_split_reads(options);
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

// Mapped, a global shuffle reads the page cache; a split larger than the memory this job may use
// reads the file system for about every sample.
void Trainer::State::warn_of_split_reads(const data::SamplerOptions& options) const {
  const data::Split& split = *setup.train_split;
  const std::int64_t memory = sys::memory_limit_bytes();
  if (split.maps_files() && config().train.shuffle && options.block_starts.empty() && memory > 0 &&
      split.input_bytes() > memory) {
    log::warn("split '{}' ({} MiB) is larger than the memory this job may use ({} MiB): a global shuffle "
              "of the mapped files reads about one page from the file system per sample; set "
              "data.shuffle_window_mb to shuffle by chunks",
              config().data.train_split, split.input_bytes() >> 20, memory >> 20);
  }
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
