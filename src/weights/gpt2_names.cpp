#include "hpctrain/weights/gpt2_names.h"

#include <ATen/ATen.h>

#include <regex>

#include "hpctrain/core/error.h"

namespace hpctrain::weights {
namespace {

const std::string kPrefix = "transformer.";
// The four Conv1D weights of a block, stored [in, out].
const std::regex kConv1dWeight(R"(h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight)");
// A block's causal mask, a buffer older GPT-2 files keep.
const std::regex kCausalMask(R"(h\.\d+\.attn\.(bias|masked_bias))");
const std::regex kAttention(R"((transformer\.)?h\.\d+\.attn\.c_attn\.weight)");

std::string without_prefix(const std::string& name) {
  return name.rfind(kPrefix, 0) == 0 ? name.substr(kPrefix.size()) : name;
}

}  // namespace

config::InitNames detect_names(const ckpt::NamedTensors& tensors) {
  for (const auto& [name, tensor] : tensors) {
    // c_attn maps C channels to 3C: a Linear's weight is [3C, C], a Conv1D's [C, 3C].
    if (std::regex_match(name, kAttention) && tensor.dim() == 2 && tensor.size(1) == 3 * tensor.size(0)) {
      return config::InitNames::kHfGpt2;
    }
    if (name == "wte.weight" || name == "lm_head.weight") return config::InitNames::kHfGpt2;
  }
  return config::InitNames::kHpctrain;
}

ckpt::NamedTensors from_hf_gpt2(const ckpt::NamedTensors& tensors, const std::string& path,
                                std::vector<std::string>& dropped) {
  ckpt::NamedTensors out;
  const at::Tensor* lm_head = nullptr;
  for (const auto& [name, tensor] : tensors) {
    const std::string bare = without_prefix(name);
    if (std::regex_match(bare, kCausalMask)) {
      dropped.push_back(name);
    } else if (name == "lm_head.weight") {
      lm_head = &tensor;
      dropped.push_back(name);
    } else if (std::regex_match(bare, kConv1dWeight) && tensor.dim() == 2) {
      out.emplace_back(kPrefix + bare, tensor.t());
    } else {
      out.emplace_back(kPrefix + bare, tensor);
    }
  }
  if (lm_head != nullptr) {
    for (const auto& [name, tensor] : out) {
      if (name != "transformer.wte.weight") continue;
      if (!lm_head->sizes().equals(tensor.sizes()) || !at::equal(lm_head->to(at::kFloat), tensor.to(at::kFloat))) {
        throw CheckpointError(path + ": lm_head.weight differs from wte.weight; hpctrain's gpt ties its output "
                                     "layer to the token embedding, so it cannot hold these weights");
      }
    }
  }
  return out;
}

ckpt::NamedTensors to_hf_gpt2(const ckpt::NamedTensors& tensors) {
  ckpt::NamedTensors out;
  for (const auto& [name, tensor] : tensors) {
    const std::string bare = without_prefix(name);
    const bool conv1d = std::regex_match(bare, kConv1dWeight) && tensor.dim() == 2;
    out.emplace_back(name, conv1d ? tensor.t().contiguous() : tensor);
    if (name == "transformer.wte.weight") out.emplace_back("lm_head.weight", tensor);
  }
  return out;
}

}  // namespace hpctrain::weights
