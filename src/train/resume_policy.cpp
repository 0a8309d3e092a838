#include "hpctrain/train/resume_policy.h"

#include <charconv>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/config/option_table.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"

namespace hpctrain::train {
namespace {

// "section.key" options that may change between a checkpoint and its resume: run length, logging,
// checkpointing, how data is read, and how the ranks share the state (dist.zero_stage: the same
// step, the additions perhaps in another order), none of which changes what is computed (nor do the
// starting loss scale, since a resume continues the checkpoint's, what a non-finite step does,
// the peak MFU is measured against, and the moving average kept beside the weights). The GPU's
// float32 shortcuts (TF32 rounds the inputs of products to a 10-bit mantissa, about 1e-3
// relative; cuDNN's algorithm choice) change results slightly, as resuming on another GPU model
// does, not what is trained; so does optim.fused, and train.cuda_graphs only changes how the same
// kernels are launched. The weights a run started from (model.init_*) are the checkpoint's by
// now: a resume takes them from the checkpoint.
bool free_to_change(const std::string& key) {
  static const std::set<std::string> keys{
      "run.dir",           "run.lock_stale_s",      "train.epochs",       "train.max_steps",
      "train.threads",     "dist.check_collectives",
      "train.eval_batch_size", "data.eval_split",   "data.prefetch",      "data.loader_threads",
      "data.cache_mb",     "data.io",               "dist.timeout_s",     "dist.check_replicas_every",
      "dist.zero_stage",   "train.loss_scale_init", "train.nonfinite",    "train.max_skipped",
      "train.peak_tflops", "train.tf32",            "train.cudnn_benchmark", "train.ema_decay",
      "model.init_from",   "model.init_names",      "model.init_strict", "optim.fused",
      "train.cuda_graphs"};
  return keys.count(key) > 0 || key.rfind("log.", 0) == 0 || key.rfind("ckpt.", 0) == 0;
}

// An INI value as a count; 0 for a missing or unreadable one (a checkpoint's config text is input).
std::int64_t count_of(const std::map<std::string, std::string>& values, const std::string& key) {
  const auto found = values.find(key);
  if (found == values.end()) return 0;
  std::int64_t count = 0;
  const char* end = found->second.data() + found->second.size();
  const auto [stop, error] = std::from_chars(found->second.data(), end, count);
  return error == std::errc() && stop == end ? count : 0;
}

// Samples per optimizer step of a config at `world` ranks (train.global_batch, else ranks x
// train.batch_size x train.accum_steps); 0 when it cannot be read.
std::int64_t global_batch_of(const std::string& ini, std::int64_t world) {
  const auto values = config::ini_values(ini);
  const std::int64_t set = count_of(values, "train.global_batch");
  if (set > 0) return set;
  const std::int64_t accumulation = values.count("train.accum_steps") ? count_of(values, "train.accum_steps") : 1;
  std::int64_t per_rank = 0;
  std::int64_t global = 0;
  if (__builtin_mul_overflow(count_of(values, "train.batch_size"), accumulation, &per_rank) ||
      __builtin_mul_overflow(per_rank, world, &global)) {
    return 0;
  }
  return global;
}

// train.global_batch and train.accum_steps only say how a global batch is reached: a restart on
// fewer nodes sets train.global_batch to keep the one it was trained with (slurm/launch.sh).
bool same_global_batch(const std::string& checkpoint_ini, const std::string& current_ini, ResumeWorlds worlds) {
  const std::int64_t before = global_batch_of(checkpoint_ini, worlds.checkpoint);
  return before > 0 && before == global_batch_of(current_ini, worlds.now);
}

}  // namespace

std::string choose_checkpoint(const config::ResumeFrom& how, const std::string& dir) {
  if (const int removed = ckpt::remove_unfinished_writes(dir); removed > 0) {
    log::warn("removed {} unfinished checkpoint write(s) in {} (a writer was killed)", removed, dir);
  }
  if (how.kind == config::ResumeFrom::Kind::kNone) return "";
  if (how.kind == config::ResumeFrom::Kind::kPath) {
    ckpt::CheckpointReader(how.path).verify();  // a bad file named by the user is an error
    return how.path;
  }
  std::vector<std::string> candidates;
  const std::string latest = ckpt::latest_checkpoint(dir);
  if (!latest.empty()) candidates.push_back(latest);
  for (const auto& path : ckpt::list_checkpoints(dir)) {
    if (path != latest) candidates.push_back(path);
  }
  for (const auto& path : candidates) {
    try {
      ckpt::CheckpointReader(path).verify();
      return path;
    } catch (const Error& e) {
      if (e.code() != ExitCode::kCheckpoint) throw;
      log::warn("checkpoint {} is unusable ({}); trying the one before it", path, e.what());
    }
  }
  if (!candidates.empty()) {
    throw CheckpointError("none of the " + std::to_string(candidates.size()) + " checkpoint(s) in " + dir +
                          " verifies; set --ckpt.resume=none to start fresh, or name one with --ckpt.resume=PATH");
  }
  return "";
}

std::string resume_config_changes(const std::string& checkpoint_ini, const std::string& current_ini,
                                  ResumeWorlds worlds) {
  const bool batch_kept = same_global_batch(checkpoint_ini, current_ini, worlds);
  std::string changes;
  for (const auto& [key, values] : config::ini_differences(checkpoint_ini, current_ini)) {
    if (free_to_change(key)) continue;
    if (batch_kept && (key == "train.global_batch" || key == "train.accum_steps")) continue;
    // A key the checkpoint's config lacks is an option added since it was written; that run had
    // the option's default behaviour, so keeping the default is no change.
    const config::Option* option = config::find_option(key);
    if (values.first.empty() && option != nullptr && option->default_text && *option->default_text == values.second) {
      continue;
    }
    changes += (changes.empty() ? "" : "; ") + key + " " + (values.first.empty() ? "(none)" : values.first) +
               " -> " + (values.second.empty() ? "(none)" : values.second);
  }
  return changes;
}

}  // namespace hpctrain::train
