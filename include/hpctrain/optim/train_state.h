// What a checkpoint needs from a run besides the model, as named tensors: the optimizer's state
// per parameter (AdamW: step, exp_avg, exp_avg_sq; SGD: momentum_buffer), and the random
// generators of this process (CPU, and the GPU's when training on one). Depends on ckpt (for
// NamedTensors) and torch (optimizer forward-declared).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace hpctrain::optim {

// "<parameter name>/<state>" for every parameter that has optimizer state (none before the first
// step, unless allocate_optimizer_state made it). `names[i]` names the optimizer's i-th parameter (its parameter groups in order). The
// tensors are the live state, not copies: write them before the next step.
ckpt::NamedTensors optimizer_state(torch::optim::Optimizer& optimizer, const std::vector<std::string>& names);
// Replaces the optimizer's state with `stored` (as optimizer_state wrote it), AdamW state made
// ahead (allocate_optimizer_state) filled in place. Throws
// CheckpointError naming what does not fit (an unknown parameter, a state of another optimizer).
void load_optimizer_state(torch::optim::Optimizer& optimizer, const std::vector<std::string>& names,
                          const ckpt::NamedTensors& stored);
// AdamW's state, made now as AdamW makes it at its first step (step 0, zero moments), but with
// every parameter's moments views of two flat buffers that `allocate_zeros(numel, options)` gives:
// a sharded rank's state then lies in two blocks of its own instead of hundreds of tensors among
// the first step's temporaries. Other optimizers, and AdamW with AMSGrad: nothing. A checkpoint
// read afterwards (load_optimizer_state) fills these buffers in place.
void allocate_optimizer_state(torch::optim::Optimizer& optimizer,
                              const std::function<at::Tensor(std::int64_t, const at::TensorOptions&)>& allocate_zeros);

// The seed of rank `rank`'s generators in a run of train.seed `seed` (re)started after `step`
// steps: distinct per rank (dropout masks differ, as separate processes' would in PyTorch DDP) and
// per step of a resume that cannot restore the ranks' own generators, reproducibly.
std::uint64_t rank_seed(std::int64_t seed, int rank, std::int64_t step);

// The states of this process's generators: {"cpu", ...} and {"cuda", ...} when `device` is a GPU.
ckpt::NamedTensors rng_state(const c10::Device& device);
// Restores what rng_state returned (entries by name; absent ones are left alone).
void restore_rng_state(const c10::Device& device, const ckpt::NamedTensors& state);

}  // namespace hpctrain::optim
