// Before a run allocates its training state, each rank estimates the memory it will still take —
// read-ahead batches, what the first forward keeps for backward, gradients and optimizer state,
// an evaluation batch, the data cache still to fill — and the job is refused in one line, naming
// the option to lower, when the ranks of a host would need more than the host (or the job's
// cgroup) has available. The per-item sizes are measured by probing the model with one and a few
// items of the real data (memory_probe.h); the arithmetic and the verdict are pure functions.
// Depends on core, config and the training setup.
#pragma once

#include <cstdint>
#include <string>

#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/config/config.h"

namespace hpctrain::train {

struct TrainingSetup;

// What one item of a split (a sample, or a window of tokens) takes, in bytes.
struct ItemBytes {
  std::int64_t read = 0;          // as read: input as stored, target, weight
  std::int64_t on_device = 0;     // finished for the model (normalized input, on its device)
  std::int64_t kept = 0;          // kept by a training forward for its backward, the output included
  std::int64_t peak_no_grad = 0;  // the most an evaluation forward holds at once
};

// What one rank will still allocate, in bytes, by kind.
struct MemoryNeed {
  std::int64_t model_state = 0;  // gradients and optimizer state (the parameters are held already)
  std::int64_t batches = 0;      // training micro-batches read ahead and finished
  std::int64_t activations = 0;  // kept by the forward of one micro-batch
  std::int64_t evaluation = 0;   // one evaluation batch, read, finished and through the forward
  std::int64_t cache = 0;        // the data cache still to fill (data.cache_mb)
  std::int64_t total() const { return model_state + batches + activations + evaluation + cache; }
};

// The need of one rank, from the measured item sizes: `read_ahead` micro-batches read ahead of the
// one in use, `accumulation` micro-batches a step; `eval_items`: an evaluation batch (0 without
// evaluation).
MemoryNeed memory_need(const config::Config& config, const ItemBytes& train, std::int64_t read_ahead,
                       std::int64_t accumulation, const ItemBytes& eval, std::int64_t eval_items,
                       std::int64_t model_state, std::int64_t cache);

// "" when `ranks_here` ranks each needing `need` fit in `available` bytes on `host`; otherwise one
// line: the need by kind, what is available, and the option that lowers the largest part.
std::string memory_problem(const MemoryNeed& need, std::int64_t available, int ranks_here, const std::string& host);

// `hpctrain train`, collective, after check_world_fits and before anything is written: every rank
// measures and estimates, logs its need, and the job stops with one ConfigError line when a host
// cannot hold its ranks. On a GPU only the host's part (batches read ahead, the cache) is checked.
void check_memory_fits(const TrainingSetup& setup, const comm::Bootstrap& bootstrap);

}  // namespace hpctrain::train
