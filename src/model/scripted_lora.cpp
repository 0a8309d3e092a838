#include "scripted_lora.h"

#include <fnmatch.h>
#include <torch/torch.h>

#include <map>

#include "hpctrain/core/error.h"
#include "lora_adapter.h"

namespace hpctrain::model {
namespace {

// Whether `pattern` names the module `name` (ScriptedAdapters' constructor says how).
bool names(const std::string& pattern, const std::string& name) {
  if (pattern.find_first_of("*?[") != std::string::npos) return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
  return name == pattern || ends_with(name, "." + pattern);
}

// The module that holds parameter `name` ("a.b.weight": a.b) and the parameter's own name.
std::pair<std::string, std::string> split_name(const std::string& name) {
  const size_t dot = name.rfind('.');
  return {name.substr(0, dot), name.substr(dot + 1)};
}

torch::jit::Module scripted_module(torch::jit::Module root, const std::string& dotted) {
  size_t start = 0;
  while (start <= dotted.size()) {
    const size_t dot = std::min(dotted.find('.', start), dotted.size());
    root = root.attr(dotted.substr(start, dot - start)).toModule();
    start = dot + 1;
  }
  return root;
}

}  // namespace

ScriptedAdapters::ScriptedAdapters(torch::jit::Module scripted, torch::nn::Module& mirror,
                                   const std::vector<TiedParameter>& tied, const LoraOptions& options,
                                   const std::set<std::string>& patterns, const std::string& path)
    : scale_(options.scale()) {
  if (options.dropout != 0.0) {
    throw ConfigError("model.lora_dropout=" + c10::str(options.dropout) + ": the adapters of a TorchScript model (" +
                      path + ") are folded into its weights for each forward, which leaves no adapter input to "
                      "drop; set it to 0");
  }
  std::map<std::string, std::shared_ptr<torch::nn::Module>> modules;
  for (const auto& m : mirror.named_modules()) modules[m.key()] = m.value();
  std::set<std::string> used;
  std::vector<std::string> candidates;  // for the message when a pattern names nothing
  for (const auto& p : mirror.named_parameters()) {
    if (!ends_with(p.key(), kWeightSuffix) || p.value().dim() != 2 || p.key() == "weight") continue;
    std::vector<std::string> held_as{p.key()};
    for (const TiedParameter& t : tied) {
      if (t.same_as == p.key() && ends_with(t.name, kWeightSuffix)) held_as.push_back(t.name);
    }
    const std::string layer = split_name(p.key()).first;
    candidates.push_back(layer);
    bool wanted = false;
    for (const std::string& name : held_as) {
      for (const std::string& pattern : patterns) {
        if (!names(pattern, split_name(name).first)) continue;
        wanted = true;
        used.insert(pattern);
      }
    }
    if (!wanted) continue;
    const std::int64_t out = p.value().size(0);
    const std::int64_t in = p.value().size(1);
    check_lora_rank(layer, in, out, options.rank);
    torch::nn::Module& owner = *modules.at(layer);
    auto a = owner.register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(in, options.rank).bias(false)));
    auto b = owner.register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(options.rank, out).bias(false)));
    {
      const torch::NoGradGuard no_grad;
      b->weight.zero_();
    }
    Adapted adapted{p.value(), a->weight, b->weight, {}};
    for (const std::string& name : held_as) {
      const auto [module, attribute] = split_name(name);
      adapted.slots.push_back({scripted_module(scripted, module), attribute});
    }
    adapted_.push_back(std::move(adapted));
  }
  for (const std::string& pattern : patterns) {
    if (used.count(pattern) != 0) continue;
    std::string known;
    for (size_t i = 0; i < candidates.size() && i < 8; ++i) known += (i == 0 ? "" : ", ") + candidates[i];
    if (candidates.size() > 8) known += ", ...";
    throw ConfigError("model.lora_targets: '" + pattern + "' names no module with a 2-d weight in model.path=" + path +
                      (candidates.empty() ? " (it has none)" : "; such modules: " + known));
  }
}

void ScriptedAdapters::set_slots(bool folded) const {
  for (const Adapted& adapted : adapted_) {
    const at::Tensor weight = folded ? adapted.weight + torch::matmul(adapted.b, adapted.a).mul(scale_) : adapted.weight;
    for (const Slot& slot : adapted.slots) {
      torch::jit::Module owner = slot.owner;
      owner.setattr(slot.attribute, weight);
    }
  }
}

ScriptedAdapters::Folded::Folded(const ScriptedAdapters& adapters) : adapters_(adapters) { adapters_.set_slots(true); }

ScriptedAdapters::Folded::~Folded() { adapters_.set_slots(false); }

}  // namespace hpctrain::model
