// Trainer: the run (plan, resume, epochs, the end) and its loop: read, step, policy.
#include "hpctrain/train/trainer.h"

#include <torch/torch.h>

#include <filesystem>

#include "hpctrain/config/parser.h"
#include "hpctrain/core/activity.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/trace.h"
#include "hpctrain/core/units.h"
#include "hpctrain/ddp/block_cache.h"
#include "hpctrain/optim/lr_schedule.h"
#include "hpctrain/optim/train_state.h"
#include "hpctrain/runtime/checkpoint_room.h"
#include "hpctrain/runtime/global_batch.h"

namespace hpctrain::train {
namespace {

TrainingSetup with_training_data(TrainingSetup setup) {
  HT_CHECK(setup.train != nullptr, "Trainer needs a training split");
  return setup;
}

}  // namespace

Trainer::Trainer(TrainingSetup setup, comm::ControlPlane& control, comm::Communicator& comm, c10::Device device,
                 runtime::RunDirectory run_dir)
    : setup_(with_training_data(std::move(setup))), control_(control), device_(device), run_dir_(std::move(run_dir)),
      metrics_(run_dir_.metrics_path(), control.world_rank() == 0),
      step_(setup_.model, setup_.config, comm, device),
      policy_(setup_.config, control),
      progress_(setup_.config, comm, device, metrics_, setup_.language_model()),
      evaluation_(setup_.eval, setup_.config, comm, device, metrics_),
      profile_(config::parse_step_range(setup_.config.log.profile_steps), run_dir_.profile_path(control.world_rank())),
      checkpointer_(setup_.config, control, run_dir_, device) {
  // What building, loading and placing the model cost this rank at most (MPI's start-up too).
  const std::int64_t peak = sys::peak_rss_bytes();
  log::info("rank {}: peak RSS {}, {} more than before the model was built", control.world_rank(), bytes_text(peak),
            bytes_text(peak - setup_.rss_before_model));
  torch::manual_seed(optim::rank_seed(setup_.config.train.seed, control.world_rank(), /*step=*/0));
}

Trainer::~Trainer() = default;

TrainSummary Trainer::run() {
  plan_run();
  if (const std::optional<Resumed> resumed = checkpointer_.resume(step_, accumulation_, peak_lr_)) {
    epoch_ = resumed->position.epoch;
    cursor_ = resumed->position.cursor;
    evaluation_.restore(resumed->best);
  }
  activity::set_step(step_.count());
  activity::enter(activity::Kind::kStep);  // between steps too, until the run ends
  if (control_.world_rank() == 0) {
    const std::string checkpoints = run_dir_.checkpoints_dir();
    runtime::warn_if_checkpoints_do_not_fit(checkpoints,
                                            runtime::checkpoint_bytes(checkpoints, setup_.checkpoint_bytes));
    const std::string config_text = config::to_ini(setup_.config);
    run_dir_.write_config(config_text);
    if (setup_.config.log.tensorboard) metrics_.start_tensorboard(run_dir_.tensorboard_dir(), step_.count(), config_text);
  }
  start_timeline();
  ddp::trim_block_cache();  // what building and resuming used, the steps may not
  const std::int64_t start_epoch = epoch_;
  const std::int64_t start_cursor = cursor_;
  std::optional<EvalResult> last_eval;
  for (std::int64_t epoch = start_epoch;
       epoch < setup_.config.train.epochs && !policy_.limit_reached(step_.count()); ++epoch) {
    if (!train_epoch(epoch, epoch == start_epoch ? start_cursor : 0)) break;
    last_eval = evaluate(epoch);  // also after an epoch cut short by max_steps
    if (sampler_->steps_from(cursor_) == 0) {  // the epoch is complete: a resume starts the next
      epoch_ = epoch + 1;
      cursor_ = 0;
    }
    if (setup_.config.ckpt.keep_best && last_eval && evaluation_.improved()) save_checkpoint(/*best=*/true);
  }
  return finish(last_eval);
}

// log.trace_steps: every rank records its timeline of those steps (core/trace.h).
void Trainer::start_timeline() {
  const config::StepRange range = config::parse_step_range(setup_.config.log.trace_steps);
  if (range.empty()) return;
  const std::string path = run_dir_.trace_path(control_.world_rank());
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("log.trace_steps: cannot create " + dir.string() + ": " + ec.message());
  trace::name_thread("train");
  trace::start(path, control_.world_rank(), range.first, range.last);
}

// The data's plan at this world size, the global batch and the learning rate's schedule.
void Trainer::plan_run() {
  const config::Config& config = setup_.config;
  const int world = control_.world_size();
  setup_.train->read_collectively(world);
  sampler_ = setup_.train->sampler(world, control_.world_rank());
  accumulation_ = runtime::accumulation_steps(config.train, world);
  const std::int64_t global_batch = config.train.batch_size * accumulation_ * world;
  peak_lr_ = optim::peak_lr(config.optim, global_batch);
  steps_per_epoch_ = (sampler_->steps_from(0) + accumulation_ - 1) / accumulation_;
  const bool dropped = !setup_.train->language_model() && config.train.drop_last;
  log::info("training on {}: {} steps per epoch, global batch {} ({} ranks x {} "
            "micro-batch(es) x {}){}; gradients in {} bucket(s), overlap {}, compression {}",
            setup_.train->describe(), steps_per_epoch_, global_batch, world, accumulation_,
            config.train.batch_size, dropped ? ", last partial batch dropped" : "", step_.update_state().bucket_count(),
            config.dist.overlap ? "on" : "off", config::name_of(config.dist.grad_compression));
  if (config.optim.lr_scaling != config::LrScaling::kNone) {
    log::info("learning rate {:.6g}: optim.lr {:.6g} x {} scaling for global batch {} (optim.base_batch {})",
              peak_lr_, config.optim.lr, config::name_of(config.optim.lr_scaling), global_batch,
              config.optim.base_batch);
  }
  total_steps_ = config.optim.decay_steps > 0 ? config.optim.decay_steps
                 : config.train.max_steps > 0 ? config.train.max_steps
                                              : config.train.epochs * steps_per_epoch_;
}

// One epoch from `cursor`: read, step, policy, until its end or train.max_steps. False when the
// run stops (a signal, or non-finite steps).
bool Trainer::train_epoch(std::int64_t epoch, std::int64_t cursor) {
  const data::LoaderOptions read_ahead{static_cast<int>(setup_.config.data.prefetch),
                                      static_cast<int>(setup_.config.data.loader_threads)};
  data::EpochReader reader(setup_.train, *sampler_, epoch, cursor, accumulation_, read_ahead, device_);
  progress_.begin_interval();
  while (!reader.done() && !policy_.limit_reached(step_.count())) {
    const std::int64_t next = step_.count() + 1;
    const bool last = policy_.is_last(next, reader.taken() + 1 == reader.steps());
    const activity::Scope stepping(activity::Kind::kStep);
    trace::begin_step(next);
    const trace::Span step_span("step", {{"step", next}});
    const data::StepInput input = [&] {
      const trace::Span span("data wait");
      return reader.next();
    }();
    const StepPlan plan{optim::lr_at(setup_.config.optim, peak_lr_, step_.count(), total_steps_), policy_.records(next, last)};
    profile_.before_step(next);
    const StepResult result = step_.run(input.micro_batches, plan);
    profile_.after_step(next);
    if (!after_step(result, input, reader, epoch, last)) return false;
  }
  return true;
}

// The policy's part of a step. False when the run stops.
bool Trainer::after_step(const StepResult& result, const data::StepInput& input, const data::EpochReader& reader,
                         std::int64_t epoch, bool last) {
  if (result.action == optim::NonfiniteAction::kAbort) {
    stop_on_nonfinite(result);
    return false;
  }
  if (!result.finite) warn_of_skipped_step(result);
  activity::set_step(step_.count());
  progress_.add({result.loss_sum, result.samples, result.finite, result.comm_s, step_.count(), step_.training_flops(),
                 step_.held_bytes()},
                input.wait_s);
  if (policy_.records(step_.count(), last)) record(result, reader, epoch);
  epoch_ = epoch;
  cursor_ = input.next_cursor;
  checkpointer_.rethrow_if_failed();  // a background write that failed ends the run now
  const AfterStep next = policy_.after_step(step_.count(), last);
  if (next.stop) {
    stopped_ = true;
    save_checkpoint();
    return false;
  }
  if (next.checkpoint) save_checkpoint();
  if (next.evaluate) {
    evaluate(epoch);
    if (setup_.config.ckpt.keep_best && evaluation_.improved()) save_checkpoint(/*best=*/true);
  }
  return true;
}

void Trainer::record(const StepResult& result, const data::EpochReader& reader, std::int64_t epoch) {
  observe::ProgressPoint at;
  at.epoch = epoch;
  at.step_in_epoch = reader.taken();
  at.steps_in_epoch = reader.steps();
  at.steps_per_epoch = steps_per_epoch_;
  at.step = step_.count();
  at.lr = step_.update_state().lr();
  at.grad_norm = result.grad_norm;
  at.skipped = step_.skipped().total();
  if (const optim::LossScaler* scaler = step_.loss_scaler()) at.loss_scale = scaler->scale();
  progress_.write(at);
}

std::optional<EvalResult> Trainer::evaluate(std::int64_t epoch) {
  if (!evaluation_.enabled()) return std::nullopt;
  const activity::Scope evaluating(activity::Kind::kEvaluation);
  const trace::Span span("evaluation");
  step_.sync_buffers();
  std::optional<EvalResult> result;
  // With train.ema_decay, the moving average is what the run's weights are for.
  step_.with_evaluated_weights([&] { result = evaluation_.run(step_.model(), epoch, step_.count()); });
  return result;
}

std::string Trainer::save_checkpoint(bool best) {
  const std::string path = checkpointer_.save(step_, position(), evaluation_.best(), best);
  policy_.checkpoint_written();
  return path;
}

// A checkpoint of the current position: the last one written, when it holds it (a periodic
// checkpoint may have been written a moment ago), or a new one.
std::string Trainer::checkpoint_of_position() {
  return checkpointer_.holds(position()) ? checkpointer_.last() : save_checkpoint();
}

void Trainer::warn_of_skipped_step(const StepResult& result) {
  if (step_.loss_scaler() != nullptr) return;  // with loss scaling, overflows are routine
  const std::string what = step_.describe_nonfinite(result.loss_sum);  // collective
  if (control_.world_rank() == 0) {
    log::warn("step {}: skipped on every rank: {} ({} in a row; train.max_skipped={})", step_.count(), what,
              step_.skipped().in_a_row(), setup_.config.train.max_skipped);
  }
}

// Collective: after a non-finite step that ends the run (train.nonfinite, train.max_skipped),
// checkpoints the last good state (the step was not applied) and says why in failure_.
void Trainer::stop_on_nonfinite(const StepResult& result) {
  const std::string what = step_.describe_nonfinite(result.loss_sum);
  const std::string path = checkpoint_of_position();
  checkpointer_.finish();
  const config::TrainConfig& train = setup_.config.train;
  const std::int64_t in_a_row = step_.skipped().in_a_row();
  const std::string rule =
      train.nonfinite == config::Nonfinite::kAbort
          ? std::string("train.nonfinite=abort stops at the first such step")
          : fmt::format("{} step(s) in a row would be skipped, more than train.max_skipped={} (the weights "
                        "are those after step {})",
                        in_a_row + 1, train.max_skipped, step_.count() - in_a_row);
  failure_ = fmt::format("step {}: {}; {}; checkpoint {} holds the last good state (epoch {}, sampler cursor {}): "
                         "lower optim.lr, set optim.clip_grad_norm, or check the step's samples (hpctrain data "
                         "order ... --epoch {} --from-cursor {})",
                         step_.count() + 1, what, rule, path, epoch_ + 1, cursor_, epoch_ + 1, cursor_);
}

TrainSummary Trainer::finish(std::optional<EvalResult> last_eval) {
  activity::enter(activity::Kind::kFinishing);  // and so it stays: the run ends
  TrainSummary summary;
  summary.steps = step_.count();
  summary.last_eval = std::move(last_eval);
  summary.stopped = stopped_;
  summary.failure = failure_;
  if (stopped_ || !failure_.empty()) {
    summary.checkpoint = checkpointer_.last();
  } else if (setup_.config.ckpt.save_final) {
    summary.checkpoint = checkpoint_of_position();
  }
  checkpointer_.finish();
  trace::finish();
  return summary;
}

}  // namespace hpctrain::train
