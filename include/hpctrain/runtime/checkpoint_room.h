// Whether run.dir's file system has room for the run's checkpoints: checked once at the start, so
// a disk that cannot hold them is said before the first write fails (Note [Out of space] in
// src/ckpt/checkpoint.cpp says what a failed write reports). Depends on config and model.
#pragma once

#include <cstdint>
#include <string>

#include "hpctrain/config/config.h"
#include "hpctrain/model/model.h"

namespace hpctrain::runtime {

// About the bytes of one checkpoint of `model` (built, not yet sharded) under `config`: the
// trainable parameters with the optimizer's moments and the moving average, the buffers, and the
// frozen parameters unless they are a LoRA base (stored as checksums).
std::int64_t checkpoint_bytes_estimate(const config::Config& config, model::Model& model);

// The bytes a checkpoint takes: the newest one in `checkpoints_dir` where there is one (a resumed
// run), else `estimate`.
std::int64_t checkpoint_bytes(const std::string& checkpoints_dir, std::int64_t estimate);

// Warns in one line when the file system of `checkpoints_dir` has less free space than two
// checkpoints of `bytes` (the last one is kept while the next is written). Rank 0's.
void warn_if_checkpoints_do_not_fit(const std::string& checkpoints_dir, std::int64_t bytes);

}  // namespace hpctrain::runtime
