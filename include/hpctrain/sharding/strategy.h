// How the ranks share the training state, as dist.zero_stage says, asked of one object: nothing
// outside this module reads the stage (lint_zero_stage counts). Stage 0 replicates everything;
// 1 shards the optimizer state and the moving average; 2 the gradients too; 3 the parameters too
// (docs/distributed.md, "Sharding (ZeRO)"). Depends on config and optim's NamedParameters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "hpctrain/config/config.h"
#include "hpctrain/optim/optimizer.h"

namespace hpctrain::comm {
class Communicator;
}  // namespace hpctrain::comm

namespace hpctrain::model {
class Model;
}  // namespace hpctrain::model

namespace hpctrain::sharding {

class GradientUpdate;

class Strategy {
 public:
  explicit Strategy(const config::DistConfig& dist) : stage_(dist.zero_stage) {}

  // Each rank holds its share of the optimizer state and of the moving average, and writes its
  // part of a checkpoint (stages 1 to 3).
  bool shards_state() const { return stage_ >= 1; }
  // Each rank holds its share of the gradients (stages 2 and 3).
  bool shards_gradients() const { return stage_ >= 2; }
  // Each rank holds its chunk of the parameters; the model gathers a block's just before running
  // it (stage 3).
  bool shards_parameters() const { return stage_ == 3; }
  // "dist.zero_stage=2", for messages.
  std::string option() const { return "dist.zero_stage=" + std::to_string(stage_); }

  // Why `config` cannot train this way ("" when it can): stage 3 needs a model with blocks.
  std::string refusal(const config::Config& config) const;
  // Why `model`'s `trainable` parameters cannot be shared so ("" when they can): stages 1 to 3
  // shard contiguous float32 parameters, and stage 3 gathers them a block at a time.
  std::string model_refusal(const optim::NamedParameters& trainable, model::Model& model) const;
  // Bytes of gradients, optimizer state and moving average (train.ema_decay) a rank will allocate
  // for trainable parameters of `elements` float32 elements and `bytes` bytes, shared among
  // `world_size` ranks as this strategy shares them.
  std::int64_t state_bytes(std::int64_t elements, std::int64_t bytes, const config::Config& config,
                           int world_size) const;
  // The update over `trainable` (name, parameter), in the module's order: replicated, or sharded
  // at this stage.
  std::unique_ptr<GradientUpdate> make_update(const config::Config& config, comm::Communicator& comm,
                                              const optim::NamedParameters& trainable, model::Model& model) const;

 private:
  int stage_;
};

}  // namespace hpctrain::sharding
