// The decisions of a resume that need no model: which checkpoint to continue from, and whether
// the config changed in a way that matters. Depends on ckpt, config and core.
#pragma once

#include <cstdint>
#include <string>

#include "hpctrain/config/config.h"

namespace hpctrain::train {

// ckpt.resume resolved on rank 0 (the others receive the answer; a shared file system is never
// consulted by each rank on its own). none: "". A path: that file, which must verify. auto:
// the checkpoint `latest` names, else the newest; one that does not verify is reported and the one
// before it tried; "" when `dir` holds none. Throws CheckpointError when checkpoints exist but none
// verifies (starting fresh then would silently lose the run). Removes the temporary files of
// writes that never finished.
std::string choose_checkpoint(const config::ResumeFrom& how, const std::string& dir);

// The world sizes that wrote a checkpoint and that resume it.
struct ResumeWorlds {
  std::int64_t checkpoint = 1;
  std::int64_t now = 1;
};

// The options that differ between a checkpoint's config and this run's, as
// "section.key old -> new; ...", leaving out those that may change on a resume (run length,
// logging, checkpointing, how data is read, and train.global_batch and train.accum_steps when the
// global batch stays the same at `worlds`); "" when none.
std::string resume_config_changes(const std::string& checkpoint_ini, const std::string& current_ini,
                                  ResumeWorlds worlds);

}  // namespace hpctrain::train
