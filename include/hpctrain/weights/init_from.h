// model.init_from: a run starts from the weights of a file (weights/weight_file.h) instead of
// random ones. The file's names are mapped onto the model's (model.init_names), then matched:
// strictly by default (every parameter and buffer present with its shape, nothing left over), or,
// with model.init_strict=false, whatever matches. Depends on config, model and weights.
#pragma once

#include <string>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/config/config.h"
#include "hpctrain/model/model.h"
#include "hpctrain/weights/weight_file.h"

namespace hpctrain::weights {

// The file's tensors in the model's names, with what was dropped as not being weights.
struct MappedWeights {
  config::InitNames names = config::InitNames::kHpctrain;  // as resolved from kAuto
  ckpt::NamedTensors tensors;
  std::vector<std::string> dropped;
};

// Reads and maps model.init_from. Throws CheckpointError for the file, ConfigError when
// model.init_names=hf-gpt2 is asked of another model than gpt.
MappedWeights map_weights(const config::ModelConfig& model, const WeightFile& file);

// Fills the gpt shape options given as 0 (model.gpt_layers, gpt_embd, gpt_block_size) from the
// weights; a given one that disagrees is left, for the match to report. `vocabulary` gets the
// embedding's rows (0 when there is none). Throws ConfigError when a 0 cannot be filled.
void fill_gpt_shape(config::ModelConfig& model, const ckpt::NamedTensors& weights, std::int64_t& vocabulary);

// model.gpt_activation=auto resolved for weights read with `names`: gelu_tanh for Hugging Face
// GPT-2's (the activation they were trained with), else gelu; logged, as is a given activation
// that differs from what the names imply. A no-op for models other than gpt.
void resolve_gpt_activation(config::ModelConfig& model, config::InitNames names);

struct InitReport {
  std::vector<std::string> loaded;
  std::vector<std::string> missing;     // in the model, not in the file
  std::vector<std::string> unexpected;  // in the file, not in the model
  std::vector<std::string> mismatched;  // "name: file [a, b] F16, model [c, d] Float"
};

// Copies the weights into the model's parameters and buffers (converting the dtype), and a tied
// parameter's second name is accepted when it equals the first. Strict: any missing, unexpected
// or mismatched tensor is one ConfigError listing them all, and the model is left untouched.
InitReport load_weights(model::Model& model, const MappedWeights& weights, bool strict, const std::string& path);

}  // namespace hpctrain::weights
