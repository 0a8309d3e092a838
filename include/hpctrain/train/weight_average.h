// train.ema_decay: an exponential moving average of the trainable parameters, kept beside them
// and used, when a run has one, by its evaluations, `hpctrain eval`, `generate` and `ckpt export
// --ema`. After every applied optimizer step, average = decay x average + (1 - decay) x parameter;
// it starts as the parameters. Whole on every rank, as the parameters are after a step at
// dist.zero_stage 0 to 2 (stage 3 is refused); checkpointed as the `ema` group under the
// parameters' names. Buffers (BatchNorm's statistics) are not averaged: the model's are used.
// Depends on ckpt, model and the train module's parameter lists.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/model/model.h"
#include "hpctrain/train/optimizer.h"

namespace hpctrain::train {

// The weights a moving average covers, under the names a checkpoint stores them: the trainable
// parameters, and the second name of a tied one (a TorchScript model's), the same tensor.
NamedParameters averaged_parameters(model::Model& model);

class WeightAverage {
 public:
  // Averages of `weights` (name, live parameter: averaged_parameters), starting as copies of them.
  WeightAverage(NamedParameters weights, double decay);

  // After an applied step: each average moves (1 - decay) of the way to its parameter.
  void update();
  // The averages become copies of the parameters again (a resume from a checkpoint without any).
  void restart();
  // The averages under their parameters' names (live tensors: read them, or load into them).
  const ckpt::NamedTensors& averages() const { return averages_; }
  // Runs `use` with the averages in place of the parameters; the parameters are put back after,
  // also when `use` throws.
  void with_averaged_parameters(const std::function<void()>& use);
  // Bytes the averages take.
  std::int64_t bytes() const;

 private:
  NamedParameters parameters_;
  ckpt::NamedTensors averages_;
  double decay_;
};

}  // namespace hpctrain::train
