// LoRA adapters (Hu et al., 2021; model.lora_* options): a frozen weight W [out, in] of a Linear
// layer gets a trainable low-rank update beside it,
//   y = x W^T + b + (alpha / r) * dropout(x) A^T B^T,   A [r, in] Kaiming-uniform, B [out, r] zero,
// so an adapted model starts exactly as its base. Parameters are named as PEFT names them:
// <layer>.lora_A.weight and <layer>.lora_B.weight. Everything else is frozen except what
// model.lora_train keeps trainable. Depends on config and ATen's tensor type.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/config/config.h"

namespace hpctrain::model {

class Model;

struct LoraOptions {
  std::int64_t rank = 0;  // r; 0: no adapters
  double alpha = 8.0;     // the update is scaled by alpha / r
  double dropout = 0.0;   // on the adapter's input only
  double scale() const { return alpha / static_cast<double>(rank); }
};

LoraOptions lora_options(const config::ModelConfig& config);

// The layers model.lora_targets names, for a gpt: any of attn, proj, fc, mlp_proj, head. (A
// TorchScript model takes patterns on its modules' names instead: src/model/scripted_lora.h.) Throws
// ConfigError for a name that is none of them, or for none at all.
std::set<std::string> lora_targets(const config::ModelConfig& config);

// model.lora_targets' items in their order, blanks around each trimmed.
std::vector<std::string> lora_target_items(const config::ModelConfig& config);

// Whether `name` is an adapter's parameter (…lora_A.weight or …lora_B.weight).
bool is_adapter_parameter(const std::string& name);

// Whether `model` has adapters (parameters so named).
bool has_adapters(Model& model);

// Throws ConfigError when the model.lora_* options do not fit one another or model.name (a model
// that takes no adapters, an unknown target or model.lora_train item, a bf16 base for TorchScript
// code); train::check_options runs it before anything is loaded.
void check_lora_options(const config::ModelConfig& config);

// Adds the adapters model.lora_* ask for to `model` and freezes every other parameter except
// those model.lora_train keeps trainable (bias: every bias; norm: every other 1-d weight, i.e.
// the norms' scales). Throws ConfigError when the options do not fit the model (check_lora_options,
// and a rank larger than a layer).
void add_lora_adapters(Model& model, const config::ModelConfig& config);

using NamedWeights = std::vector<std::pair<std::string, at::Tensor>>;

// `weights` with every adapter folded into the weight it adapts, W + scale * B A, and the
// adapters left out. Throws ConfigError when an adapter's weight is not among `weights`.
NamedWeights merge_adapters(const NamedWeights& weights, double scale);

}  // namespace hpctrain::model
