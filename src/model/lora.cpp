#include "hpctrain/model/lora.h"

#include <torch/torch.h>

#include <map>
#include <sstream>

#include "hpctrain/core/error.h"
#include "hpctrain/model/model.h"
#include "lora_adapter.h"

namespace hpctrain::model {
namespace {

const std::set<std::string> kGptTargets{"attn", "proj", "fc", "mlp_proj", "head"};
const std::string kAdapterA = ".lora_A.weight";  // PEFT's names, after the adapted layer's
const std::string kAdapterB = ".lora_B.weight";

std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto first = item.find_first_not_of(" \t");
    const auto last = item.find_last_not_of(" \t");
    if (first != std::string::npos) items.push_back(item.substr(first, last - first + 1));
  }
  return items;
}

// model.lora_train: which of the frozen base's parameters learn beside the adapters.
struct KeptTrainable {
  bool bias = false;
  bool norm = false;

  bool keeps(const std::string& name, const at::Tensor& parameter) const {
    if (ends_with(name, ".bias")) return bias;
    return norm && parameter.dim() == 1;  // a norm's scale: the other 1-d weights
  }
};

KeptTrainable kept_trainable(const std::string& text) {
  KeptTrainable kept;
  for (const std::string& item : comma_list(text)) {
    if (item == "bias") {
      kept.bias = true;
    } else if (item == "norm") {
      kept.norm = true;
    } else {
      throw ConfigError("model.lora_train: '" + item + "' is not bias or norm (a comma-separated list of them, "
                        "or empty: only the adapters learn)");
    }
  }
  return kept;
}

// model.lora_targets for a TorchScript or llama model: names or patterns on its modules' names,
// which the model matches (scripted_lora.h, llama.cpp).
std::set<std::string> target_patterns(const config::ModelConfig& config) {
  const std::vector<std::string> items = comma_list(config.lora_targets);
  if (items.empty()) {
    if (config.name == config::ModelName::kLlama) {
      throw ConfigError("model.lora_targets is empty: name the llama model's layers that get adapters (e.g. "
                        "q_proj,k_proj,v_proj,o_proj or all-linear)");
    }
    throw ConfigError("model.lora_targets is empty: name the modules of model.path=" + config.path +
                      " whose weights get adapters (e.g. fc1,fc2 or 'layers.*.proj')");
  }
  return {items.begin(), items.end()};
}

bool takes_patterns(const config::ModelConfig& config) {
  return config.name == config::ModelName::kTorchscript || config.name == config::ModelName::kLlama;
}

}  // namespace

LoraOptions lora_options(const config::ModelConfig& config) {
  return LoraOptions{config.lora_rank, config.lora_alpha, config.lora_dropout};
}

std::set<std::string> lora_targets(const config::ModelConfig& config) {
  std::set<std::string> targets;
  for (const std::string& item : comma_list(config.lora_targets)) {
    if (kGptTargets.count(item) == 0) {
      throw ConfigError("model.lora_targets: '" + item + "' names no layer of the gpt model; use any of attn "
                        "(attention's c_attn), proj (attention's c_proj), fc (mlp.c_fc), mlp_proj (mlp.c_proj), head");
    }
    targets.insert(item);
  }
  if (targets.empty()) throw ConfigError("model.lora_targets is empty: name the layers that get adapters (e.g. attn)");
  return targets;
}

std::vector<std::string> lora_target_items(const config::ModelConfig& config) {
  return comma_list(config.lora_targets);
}

bool is_adapter_parameter(const std::string& name) { return ends_with(name, kAdapterA) || ends_with(name, kAdapterB); }

bool has_adapters(Model& model) {
  for (const auto& p : model.module().named_parameters()) {
    if (is_adapter_parameter(p.key())) return true;
  }
  return false;
}

void check_lora_options(const config::ModelConfig& config) {
  if (config.lora_rank == 0) return;
  const bool scripted = config.name == config::ModelName::kTorchscript;
  if (!takes_patterns(config) && config.name != config::ModelName::kGpt) {
    throw ConfigError(std::string("model.lora_rank=") + std::to_string(config.lora_rank) + ": model.name=" +
                      config::name_of(config.name) + " takes no adapters; LoRA adapts model.name=gpt, llama or "
                      "torchscript");
  }
  if (scripted && config.lora_base_dtype == config::LoraBaseDtype::kBf16) {
    throw ConfigError("model.lora_base_dtype=bf16: a TorchScript model's code would meet bfloat16 weights it was not "
                      "written for; keep float32 (train.precision=bf16 still computes in bf16)");
  }
  kept_trainable(config.lora_train);
  if (takes_patterns(config)) {
    target_patterns(config);
  } else {
    lora_targets(config);
  }
}

void add_lora_adapters(Model& model, const config::ModelConfig& config) {
  if (config.lora_rank == 0) return;
  check_lora_options(config);
  const KeptTrainable kept = kept_trainable(config.lora_train);
  const bool bf16_base = config.lora_base_dtype == config::LoraBaseDtype::kBf16;
  const std::set<std::string> targets = takes_patterns(config) ? target_patterns(config) : lora_targets(config);
  const bool added = model.add_adapters(lora_options(config), targets);
  HT_CHECK(added, "check_lora_options lets through only models that take adapters");
  const torch::NoGradGuard no_grad;
  for (auto& p : model.module().named_parameters()) {
    at::Tensor& parameter = p.value();
    parameter.set_requires_grad(is_adapter_parameter(p.key()) || kept.keeps(p.key(), parameter));
    if (bf16_base && !parameter.requires_grad() && parameter.dim() >= 2) {
      parameter.set_data(parameter.to(torch::kBFloat16));  // the base's matrices and embeddings
    }
  }
}

NamedWeights merge_adapters(const NamedWeights& weights, double scale) {
  std::map<std::string, at::Tensor> by_name(weights.begin(), weights.end());
  const torch::NoGradGuard no_grad;
  NamedWeights merged;
  for (const auto& [name, tensor] : weights) {
    if (is_adapter_parameter(name)) continue;
    const std::string layer = ends_with(name, kWeightSuffix) ? name.substr(0, name.size() - kWeightSuffix.size()) : "";
    const auto a = by_name.find(layer + kAdapterA);
    const auto b = by_name.find(layer + kAdapterB);
    if (layer.empty() || a == by_name.end() || b == by_name.end()) {
      merged.emplace_back(name, tensor);
      continue;
    }
    const at::Tensor update = torch::matmul(b->second.to(torch::kFloat), a->second.to(torch::kFloat)).mul(scale);
    merged.emplace_back(name, (tensor.to(torch::kFloat) + update).to(tensor.scalar_type()));
  }
  for (const auto& [name, tensor] : weights) {
    if (!ends_with(name, kAdapterA)) continue;
    const std::string layer = name.substr(0, name.size() - kAdapterA.size());
    if (by_name.count(layer + kWeightSuffix) == 0) {
      throw ConfigError("the adapter " + layer + " has no weight '" + layer + ".weight' to merge into");
    }
  }
  return merged;
}

void check_lora_rank(const std::string& where, std::int64_t in, std::int64_t out, std::int64_t rank) {
  if (rank > std::min(in, out)) {
    throw ConfigError("model.lora_rank=" + std::to_string(rank) + " is larger than layer " + where + " (" +
                      std::to_string(in) + " inputs, " + std::to_string(out) + " outputs) allows; use at most " +
                      std::to_string(std::min(in, out)));
  }
}

LoraAdapter::LoraAdapter(torch::nn::Module& layer, const std::string& where, std::int64_t in, std::int64_t out,
                         const LoraOptions& options)
    : scale_(options.scale()) {
  check_lora_rank(where, in, out, options.rank);
  dropout_ = layer.register_module("lora_dropout", torch::nn::Dropout(options.dropout));
  // Linear's own initialization of A is PEFT's: Kaiming-uniform with a = sqrt(5).
  a_ = layer.register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(in, options.rank).bias(false)));
  b_ = layer.register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(options.rank, out).bias(false)));
  const torch::NoGradGuard no_grad;
  b_->weight.zero_();
}

at::Tensor LoraAdapter::operator()(const at::Tensor& x) { return b_(a_(dropout_(x))).mul(scale_); }

at::Tensor base_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const at::ScalarType dtype = weight.scalar_type();
  if (x.scalar_type() == dtype) return torch::linear(x, weight, bias);
  // A bf16 base (model.lora_base_dtype): its product in bfloat16, the result in x's dtype. Under
  // autocast x is cast to bfloat16 anyway; without it, the residual stream stays float32.
  return torch::linear(x.to(dtype), weight, bias.defined() ? bias.to(dtype) : bias).to(x.scalar_type());
}

at::Tensor padded_rows_linear(const at::Tensor& x, const at::Tensor& weight, std::int64_t multiple) {
  const std::int64_t rows = weight.size(0);
  const std::int64_t padded = (rows + multiple - 1) / multiple * multiple;
  if (padded == rows) return base_linear(x, weight);
  return base_linear(x, at::constant_pad_nd(weight, {0, 0, 0, padded - rows})).narrow(-1, 0, rows);
}

at::Tensor adapted(torch::nn::Linear& layer, const std::unique_ptr<LoraAdapter>& adapter, const at::Tensor& x) {
  at::Tensor y = base_linear(x, layer->weight, layer->bias);
  return adapter ? y + (*adapter)(x) : y;
}

}  // namespace hpctrain::model
