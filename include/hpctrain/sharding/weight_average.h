// train.ema_decay: an exponential moving average of the trainable parameters, kept beside them
// and used, when a run has one, by its evaluations, `hpctrain eval`, `generate`, `sample` and
// `ckpt export --ema`. After every applied optimizer step, average = decay x average + (1 - decay)
// x parameter; it starts as the parameters. Each rank averages the weights it updates
// (GradientUpdate::owned_weights): all of them when replicated, its 1/W share at dist.zero_stage 1
// to 3, so the average is sharded as the optimizer state is. Checkpointed as the `ema` group under
// the parameters' names, whole tensors either way (each rank writes its slices when sharded).
// Buffers (BatchNorm's statistics) are not averaged: the model's are used. Depends on ckpt, model
// and this module's GradientUpdate.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/model/model.h"
#include "hpctrain/optim/optimizer.h"
#include "hpctrain/sharding/gradient_update.h"

namespace hpctrain::sharding {

// Whole tensors as slices that cover them (offset 0, the tensor's own shape).
ckpt::TensorSlices whole_slices(const optim::NamedParameters& weights);

class WeightAverage {
 public:
  // Averages of `weights` (live views of the parameters' elements), starting as copies of them.
  // `sharded`: the weights are this rank's share of a sharded update's, and checkpoints get them
  // as slices; otherwise whole tensors, which rank 0 writes.
  WeightAverage(ckpt::TensorSlices weights, double decay, bool sharded);

  // The average of what `update` updates on this rank, with `model`'s tied names added;
  // `sharded`: the update's strategy shards the state (Strategy::shards_state).
  static WeightAverage of_update(const UpdateState& update, model::Model& model, double decay, bool sharded);

  // After an applied step: each average moves (1 - decay) of the way to its weight.
  void update();
  // The averages become copies of the weights again (a resume from a checkpoint without any).
  void restart();
  // The averages, named and placed as their weights (live tensors: read them, or load into them).
  const ckpt::TensorSlices& averages() const { return averages_; }
  // Adds the averages to a checkpoint's `ema` group: whole tensors, or this rank's slices.
  void add_to(ckpt::Checkpoint& checkpoint) const;
  // Reads this rank's averages from `reader`'s ema group, whatever world size and stage wrote it.
  // Throws CheckpointError naming what does not fit.
  void load(const ckpt::CheckpointReader& reader);
  // Runs `use` with the averages in place of the weights; the weights are put back after, also
  // when `use` throws. `weights_changed` runs after each swap (GradientUpdate::owned_weights_changed:
  // a sharded update makes the parameters whole from the swapped shares); it is not run when `use`
  // throws, since a collective would wait for ranks that did not fail.
  void with_averaged_weights(const std::function<void()>& use, const std::function<void()>& weights_changed = {});
  // Bytes the averages take on this rank.
  std::int64_t bytes() const;

 private:
  ckpt::TensorSlices weights_;
  ckpt::TensorSlices averages_;
  double decay_;
  bool sharded_;
};

}  // namespace hpctrain::sharding
