// Trainer: checkpoints (every rank's generators gathered, rank 0 writes, in the background with
// ckpt.async) and resuming from one.
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "hpctrain/config/parser.h"
#include "hpctrain/core/version.h"
#include "hpctrain/train/resume_policy.h"
#include "hpctrain/train/resume_state.h"
#include "hpctrain/train/train_state.h"
#include "trainer_state.h"

namespace hpctrain::train {
namespace {

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

}  // namespace

ckpt::NamedTensors model_state(model::Model& model) {
  ckpt::NamedTensors out;
  for (auto& p : model.module().named_parameters()) out.emplace_back(p.key(), p.value());
  for (auto& b : model.module().named_buffers()) out.emplace_back(b.key(), b.value());
  for (const auto& tied : model.tied_parameters()) out.emplace_back(tied.name, tied.tensor);
  return out;
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

}  // namespace hpctrain::train
