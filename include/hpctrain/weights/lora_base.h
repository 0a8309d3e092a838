// The frozen base of a model with LoRA adapters (model/lora.h). A checkpoint of such a model holds
// the adapters and whatever else trains, not the base: in its place, group "base" holds each base
// weight's checksum, and whoever reads the checkpoint rebuilds the base (model.init_from, or
// train.seed) and checks it against them. Depends on ckpt, model and the weights module's readers.
#pragma once

#include <string>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/model/model.h"

namespace hpctrain::weights {

// Each frozen base weight's fletcher32 (an int64 scalar under the weight's name); empty for a
// model without adapters.
ckpt::NamedTensors base_checksums(model::Model& model);

// Where a LoRA model's base comes from, for messages: model.init_from, or train.seed's weights;
// a TorchScript model's model.path (and model.init_from).
std::string base_source(const config::ModelConfig& config);

// Checks `model`'s base against the checksums in `reader`'s group "base". Throws ConfigError
// naming the first weight that differs (the base is not the one the adapters were trained on:
// `source` says where it came from) or the weights the checkpoint has no checksum for.
void check_base(const ckpt::CheckpointReader& reader, model::Model& model, const std::string& source);

// Which of a checkpoint's weights to put to use.
enum class Weights { kTrained, kAverageIfKept };

// Reads the model weights of the checkpoint `reader` into `model`, built from the checkpoint's
// model config `config` after train.seed was set. With adapters, the base comes first: the seed's
// weights, or model.init_from's, checked against the checkpoint's checksums. kAverageIfKept: the
// trainable weights are then the moving average's (train.ema_decay) where the checkpoint holds
// one, and this says so in the log.
void read_checkpoint_weights(const ckpt::CheckpointReader& reader, model::Model& model,
                             const config::ModelConfig& config, Weights which);

}  // namespace hpctrain::weights
