// Checkpointer::resume: which checkpoint (rank 0 decides), whether the config still fits, the
// checkpoint read into the run's Step, and what a change of world size means for the run.
#include <torch/torch.h>

#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/optim/train_state.h"
#include "hpctrain/train/checkpointer.h"
#include "hpctrain/train/resume_policy.h"
#include "hpctrain/train/resume_state.h"
#include "hpctrain/weights/lora_base.h"

namespace hpctrain::train {

std::optional<Resumed> Checkpointer::resume(Step& step, std::int64_t accumulation, double peak_lr) {
  const std::string chosen = choose();
  if (chosen.empty()) {
    log::info("starting fresh (ckpt.resume={}; no checkpoint to continue from)",
              config_.ckpt.resume.text());
    return std::nullopt;
  }
  const ckpt::CheckpointReader reader(chosen);
  const ckpt::CheckpointMeta& meta = reader.meta();
  check_config_unchanged(reader);
  sharding::UpdateState& update = step.update_state();
  const auto read_optimizer_state = [&update](const ckpt::CheckpointReader& r) { update.load_optimizer_state(r); };
  ResumedState state;
  const ResumeTargets targets{step.model(),   read_optimizer_state, step.skipped(),         step.loss_scaler(),
                              step.average(), device_,              control_.world_rank(), control_.world_size(),
                              weights::base_source(config_.model)};
  // At stage 3 the model is read whole (as at start-up, when it was built whole) and then sharded.
  update.with_whole_parameters([&] { state = read_resume_state(reader, targets); });
  step.set_count(state.step);
  if (step.loss_scaler() && !state.loss_scale_restored) {
    log::warn("checkpoint {} holds no loss scale (written without loss scaling); starting from "
              "train.loss_scale_init={}", chosen, config_.train.loss_scale_init);
  }
  if (sharding::WeightAverage* average = step.average(); average && !state.average_restored) {
    average->restart();
    log::warn("checkpoint {} holds no moving average of the weights (written with train.ema_decay=0); the "
              "average starts from the resumed weights", chosen);
  }
  if (!state.generators_restored) {
    // Another world size: no rank's generators carry over; new ones, distinct per rank and step.
    torch::manual_seed(optim::rank_seed(config_.train.seed, control_.world_rank(), state.step));
  }
  const Resumed resumed{{state.step, state.epoch, state.cursor}, {state.best_test_acc, state.best_test_loss}};
  log::info("resumed from {}: step {}, epoch {}, sampler cursor {} (written by {} rank(s))", chosen, state.step,
            state.epoch + 1, state.cursor, meta.world_size);
  explain_world_change(meta, resumed.position, accumulation, peak_lr);
  return resumed;
}

// Rank 0 resolves ckpt.resume and broadcasts its answer: a shared file system is never consulted
// by each rank on its own.
std::string Checkpointer::choose() const {
  std::string chosen;
  if (control_.world_rank() == 0) chosen = choose_checkpoint(config_.ckpt.resume, run_dir_.checkpoints_dir());
  std::vector<std::uint8_t> bytes(chosen.begin(), chosen.end());
  control_.broadcast_bytes(bytes, 0);
  return std::string(bytes.begin(), bytes.end());
}

void Checkpointer::check_config_unchanged(const ckpt::CheckpointReader& reader) const {
  const std::string changes = resume_config_changes(reader.meta().config_text, config::to_ini(config_),
                                                    {reader.meta().world_size, control_.world_size()});
  if (changes.empty()) return;
  if (config_.ckpt.allow_config_change) {
    log::warn("resuming with a changed config ({}), as ckpt.allow_config_change=true", changes);
    return;
  }
  throw ConfigError("the config differs from that of checkpoint " + reader.path() + ": " + changes +
                    "; resume with the checkpoint's values (h5dump -a config shows them), set "
                    "--ckpt.resume=none to start fresh, or --ckpt.allow_config_change=true");
}

void Checkpointer::explain_world_change(const ckpt::CheckpointMeta& meta, const RunPosition& at,
                                        std::int64_t accumulation, double peak_lr) const {
  const int world = control_.world_size();
  if (meta.world_size == world || control_.world_rank() != 0) return;
  const config::TrainConfig& train = config_.train;
  const std::string batch =
      train.global_batch > 0
          ? "the global batch stays " + std::to_string(train.global_batch) + " (train.global_batch; " +
                std::to_string(accumulation) + " micro-batch(es) per step now)"
          : "the global batch becomes " + std::to_string(world * train.batch_size * accumulation) +
                " (set train.global_batch to keep it)";
  const std::string lr = config_.optim.lr_scaling == config::LrScaling::kNone
                             ? "the learning rate is not rescaled (optim.lr_scaling=none)"
                             : "the learning rate peaks at " + std::to_string(peak_lr) + " (optim.lr_scaling=" +
                                   config::name_of(config_.optim.lr_scaling) + ")";
  log::warn("the checkpoint was written by {} rank(s), this run has {}: epoch {} continues with the "
            "samples not yet seen (from global cursor {}); {}; {}; dropout draws differ from an "
            "uninterrupted run",
            meta.world_size, world, at.epoch + 1, at.cursor, batch, lr);
}

}  // namespace hpctrain::train
