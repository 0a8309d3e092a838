// How a step's gradients become new parameters: gathered over the ranks, checked, clipped and
// applied by the optimizer. Step (step.h) drives a GradientUpdate and never branches on which; what
// it keeps between steps (optimizer state, the weights it owns, what it holds) is its UpdateState,
// which the checkpoint, the resume and the moving average use.
// Replicated (dist.zero_stage=0): every rank averages all gradients (GradSync, in buckets during
// backward) and applies the whole optimizer step to its own copy. Sharded (dist.zero_stage=1, 2):
// the buckets are reduce-scattered, each rank's optimizer updates only the elements it owns
// (ddp/shard_plan.h), and the updated parameters are all-gathered (docs/distributed.md, "Sharding
// (ZeRO)"). Stage 3 shards the parameters too: each rank keeps its chunk of every block's
// parameters, and the model's forward gathers a block's just before running it (model.h's
// BlockHooks). Depends on ckpt, comm, ddp, config, model, optim's LossScaler and optimizer factory,
// and observe's HeldBytes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/config/config.h"
#include "hpctrain/model/model.h"
#include "hpctrain/observe/held_bytes.h"
#include "hpctrain/optim/loss_scaler.h"
#include "hpctrain/optim/optimizer.h"

namespace hpctrain::comm {
class Communicator;
}  // namespace hpctrain::comm

namespace hpctrain::ddp {
struct GradSyncOptions;
}  // namespace hpctrain::ddp

namespace hpctrain::sharding {

// What an update keeps between steps, for whoever checkpoints, resumes, averages or reports on it.
class UpdateState {
 public:
  virtual ~UpdateState() = default;

  // This rank's optimizer state for a checkpoint: whole tensors into checkpoint.groups["optim"]
  // (replicated; rank 0's is written) or this rank's slices into checkpoint.slices["optim"] (each
  // rank writes its own); at stage 3 also its slices of the parameters, into slices["model"].
  // Stored the same way either way (docs/checkpoint-format.md).
  virtual void add_state(ckpt::Checkpoint& checkpoint) = 0;
  // Collective at stage 3: runs `use` with every parameter whole on this rank (gathered), then keeps
  // what `use` wrote into them (a checkpoint read) and frees them again. Other stages just run it.
  virtual void with_whole_parameters(const std::function<void()>& use) { use(); }
  // Replaces the optimizer's state with the checkpoint's, whatever world size and stage wrote it.
  // Throws CheckpointError naming what does not fit.
  virtual void load_optimizer_state(const ckpt::CheckpointReader& reader) = 0;
  // The weights this rank updates, as live views named and placed in their parameters: the whole
  // trainable parameters when replicated; at stages 1 to 3 this rank's pieces of them.
  virtual ckpt::TensorSlices owned_weights() const = 0;
  // Collective: after the owned weights were overwritten in place, the parameters a forward uses
  // follow them (stages 1 and 2 all-gather them again; stage 3 drops what it had gathered).
  virtual void owned_weights_changed() {}
  // What this rank holds now (optimizer state: as it will hold once stepped).
  virtual observe::HeldBytes held_bytes() const = 0;
  virtual double lr() const = 0;  // the optimizer's current learning rate
  virtual std::size_t bucket_count() const = 0;
};

// What a step asks of an update, in the order it asks.
class GradientUpdate {
 public:
  virtual ~GradientUpdate() = default;

  // Before a step's first backward: the gradients start from zero.
  virtual void zero_grad() = 0;
  // Before each backward of a step; `last_micro_batch`: it completes the step's gradients.
  virtual void begin_backward(bool last_micro_batch) = 0;
  // Collective: the step's gradients, summed over its backwards, averaged over the ranks.
  virtual void reduce_gradients() = 0;
  // True when no averaged gradient holds inf or NaN; with `scaler`, divides them by its scale first.
  // Every rank decides alike.
  virtual bool unscale_and_check(const optim::LossScaler* scaler) = 0;
  // The averaged gradients' global L2 norm before clipping them to `max_norm` (0: no clipping), when
  // clipping or `want_norm`.
  virtual std::optional<double> clip(double max_norm, bool want_norm) = 0;
  // Sets the learning rate, and with `apply` takes the optimizer step.
  virtual void update(double lr, bool apply) = 0;
  // Collective: the name of the first parameter whose averaged gradient holds inf or NaN, "" if
  // none (for messages).
  virtual std::string first_nonfinite_gradient() = 0;

  // What it keeps between steps.
  virtual UpdateState& state() = 0;
};

// The replicated update over `trainable` (name, parameter), in the module's order: GradSync with
// dist.bucket_mb, dist.overlap and dist.grad_compression, and the optimizer of `config.optim`.
std::unique_ptr<GradientUpdate> replicated_update(const config::Config& config, comm::Communicator& comm,
                                                  const optim::NamedParameters& trainable);

// The sharded update of dist.zero_stage 1 (the optimizer state sharded), 2 (the gradients too) or
// 3 (the parameters too: `model` gathers them block by block, and must have blocks); parameters
// must be contiguous float32 tensors.
std::unique_ptr<GradientUpdate> sharded_update(const config::Config& config, comm::Communicator& comm,
                                               const optim::NamedParameters& trainable, model::Model& model);

// GradSync's options from dist.bucket_mb, dist.overlap and dist.grad_compression.
ddp::GradSyncOptions gradient_sync_options(const config::DistConfig& dist);
}  // namespace hpctrain::sharding
