#include "hpctrain/weights/init_from.h"

#include <torch/torch.h>

#include <map>
#include <regex>

#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/model/lora.h"
#include "hpctrain/model/parameter_memory.h"
#include "hpctrain/weights/gpt2_names.h"

namespace hpctrain::weights {
namespace {

const at::Tensor* find(const ckpt::NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

// "[50257, 768] Half"
std::string describe(const at::Tensor& t) { return c10::str(t.sizes()) + " " + c10::toString(t.scalar_type()); }

bool compatible(const at::Tensor& stored, const at::Tensor& target) {
  const auto kind = [](const at::Tensor& t) { return t.is_floating_point() ? 0 : t.scalar_type() == at::kBool ? 1 : 2; };
  return stored.sizes().equals(target.sizes()) && kind(stored) == kind(target);
}

// "a, b, c" for the first `shown` names, then how many more.
std::string listing(const std::vector<std::string>& names, size_t shown = 12) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < shown; ++i) out += (i == 0 ? "" : ", ") + names[i];
  if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

std::string summary(const InitReport& report) {
  std::string out;
  const auto add = [&](const char* what, const std::vector<std::string>& names) {
    if (!names.empty()) out += std::string(out.empty() ? "" : "; ") + what + ": " + listing(names);
  };
  add("missing from the file", report.missing);
  add("not in the model", report.unexpected);
  add("of another shape or kind", report.mismatched);
  return out;
}

}  // namespace

MappedWeights map_weights(const config::ModelConfig& model, const WeightFile& file) {
  MappedWeights out;
  out.names = model.init_names;
  const bool gpt = model.name == config::ModelName::kGpt;
  if (out.names == config::InitNames::kAuto) {
    out.names = gpt ? detect_names(file.tensors()) : config::InitNames::kHpctrain;
  }
  if (out.names == config::InitNames::kHfGpt2 && !gpt) {
    throw ConfigError(std::string("model.init_names=hf-gpt2 maps GPT-2's names onto model.name=gpt, not ") +
                      config::name_of(model.name) + "; set model.init_names=hpctrain (the model's own names)");
  }
  out.tensors = out.names == config::InitNames::kHfGpt2 ? from_hf_gpt2(file.tensors(), file.path(), out.dropped)
                                                         : file.tensors();
  return out;
}

void fill_gpt_shape(config::ModelConfig& model, const ckpt::NamedTensors& weights, std::int64_t& vocabulary) {
  const at::Tensor* wte = find(weights, "transformer.wte.weight");
  const at::Tensor* wpe = find(weights, "transformer.wpe.weight");
  vocabulary = wte != nullptr && wte->dim() == 2 ? wte->size(0) : 0;
  std::int64_t layers = 0;
  const std::regex block(R"(transformer\.h\.(\d{1,6})\..*)");
  for (const auto& [name, tensor] : weights) {
    std::smatch m;
    if (std::regex_match(name, m, block)) layers = std::max<std::int64_t>(layers, std::stoll(m[1].str()) + 1);
  }
  const auto fill = [&](std::int64_t& option, const char* key, std::int64_t value, const char* from) {
    if (option != 0) return;
    if (value <= 0) {
      throw ConfigError(std::string(key) + "=0 takes its value from model.init_from's " + from +
                        ", which the file does not have; set " + key);
    }
    option = value;
  };
  fill(model.gpt_layers, "model.gpt_layers", layers, "transformer.h.N blocks");
  fill(model.gpt_embd, "model.gpt_embd", wte != nullptr && wte->dim() == 2 ? wte->size(1) : 0,
       "transformer.wte.weight");
  fill(model.gpt_block_size, "model.gpt_block_size", wpe != nullptr && wpe->dim() == 2 ? wpe->size(0) : 0,
       "transformer.wpe.weight");
}

void resolve_gpt_activation(config::ModelConfig& model, config::InitNames names) {
  if (model.name != config::ModelName::kGpt) return;
  const bool gpt2 = names == config::InitNames::kHfGpt2;
  const auto implied = gpt2 ? config::GptActivation::kGeluTanh : config::GptActivation::kGelu;
  if (model.gpt_activation == config::GptActivation::kAuto) {
    model.gpt_activation = implied;
    log::info("model.gpt_activation: {} ({}; set model.gpt_activation to choose)", config::name_of(implied),
              gpt2 ? "Hugging Face GPT-2's weights were trained with the tanh GELU" : "the exact GELU");
  } else if (model.gpt_activation != implied && gpt2) {
    log::info("model.gpt_activation={} as given, though Hugging Face GPT-2's weights were trained with gelu_tanh",
              config::name_of(model.gpt_activation));
  }
}

InitReport load_weights(model::Model& model, const MappedWeights& weights, bool strict, const std::string& path) {
  std::map<std::string, at::Tensor> targets;
  for (const auto& p : model.module().named_parameters()) targets.emplace(p.key(), p.value());
  for (const auto& b : model.module().named_buffers()) targets.emplace(b.key(), b.value());
  std::map<std::string, std::string> tied;  // second name -> first
  for (const auto& t : model.tied_parameters()) tied.emplace(t.name, t.same_as);
  InitReport report;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // target, stored
  for (const auto& [name, stored] : weights.tensors) {
    const auto target = targets.find(tied.count(name) != 0 ? tied.at(name) : name);
    if (target == targets.end()) {
      report.unexpected.push_back(name);
    } else if (!compatible(stored, target->second)) {
      report.mismatched.push_back(name + " (file " + describe(stored) + ", model " + describe(target->second) + ")");
    } else if (tied.count(name) == 0) {
      copies.emplace_back(target->second, stored);
      report.loaded.push_back(name);
    }
  }
  for (const auto& [name, target] : targets) {
    // LoRA adapters start as their own initialization makes them, not from the base's file.
    if (find(weights.tensors, name) == nullptr && !model::is_adapter_parameter(name)) report.missing.push_back(name);
  }
  const std::string problems = summary(report);
  if (strict && !problems.empty()) {
    throw ConfigError("model.init_from=" + path + " (read with " + config::name_of(weights.names) +
                      " names) does not fit the model: " + problems +
                      ". Check model.name and its shape options, model.init_names, or set model.init_strict=false");
  }
  const torch::NoGradGuard no_grad;
  const Timer timer;  // a mapped file's reads happen here
  double megabytes = 0;
  std::int64_t deferred = 0;
  for (auto& [target, stored] : copies) {
    if (model::lacks_memory(target)) {  // copied by whoever shards it, its part only
      model.deferred_weights().sources[target.unsafeGetTensorImpl()] = stored;
      ++deferred;
      continue;
    }
    target.copy_(stored);
    megabytes += static_cast<double>(stored.nbytes()) / 1e6;
  }
  if (deferred > 0) log::info("model.init_from: {} tensor(s) to be read shard by shard", deferred);
  log::info("model.init_from: {} tensor(s) ({:.1f} MB) loaded from {} ({} names) in {:.3f} s", report.loaded.size(),
            megabytes, path, config::name_of(weights.names), timer.elapsed_s());
  if (!problems.empty()) log::warn("model.init_from (model.init_strict=false) left out: {}", problems);
  if (!weights.dropped.empty()) log::info("model.init_from: not weights, or tied: {}", listing(weights.dropped));
  return report;
}

}  // namespace hpctrain::weights
