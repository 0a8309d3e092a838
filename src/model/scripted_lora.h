// LoRA adapters for a TorchScript model (model.name=torchscript with model.lora_rank). Private to
// src/model. Note [Folded adapters]: the scripted code reads each weight from an attribute of its
// module, and cannot be given an extra branch beside a layer; so for one forward the attribute of
// every adapted weight W is set to W + scale * B A, a tensor of the autograd graph (gradients reach
// A and B through it), and set back to W afterwards. This is the adapted model exactly, for any use
// of W (a Linear's, a tied output layer's), except that dropout cannot act on the adapter's input
// alone: model.lora_dropout must be 0. Each adapted weight's full-size update is formed once per
// forward (and its gradient once per backward); the base still has no gradient, optimizer state
// or bucket.
#pragma once

#include <torch/nn/module.h>
#include <torch/script.h>

#include <set>
#include <string>
#include <vector>

#include "hpctrain/model/lora.h"
#include "hpctrain/model/model.h"

namespace hpctrain::model {

class ScriptedAdapters {
 public:
  // Registers lora_A [r, in] and lora_B [out, r] (PEFT's names) on the modules of `mirror` (the
  // nn::Module tree holding `scripted`'s parameters under the same names) whose 2-d `weight` a
  // pattern of `patterns` names: a module name, or its last dotted parts (PEFT's rule, "fc" names
  // "block.0.fc"), or a shell pattern with * ? [ ] on the whole name ("layers.*.proj"). A weight
  // tied to another (`tied`) is adapted once, under its first name, and folded in under both.
  // Throws ConfigError (naming `path`) for a pattern that names no such weight, a rank too large
  // for a weight, or model.lora_dropout != 0.
  ScriptedAdapters(torch::jit::Module scripted, torch::nn::Module& mirror, const std::vector<TiedParameter>& tied,
                   const LoraOptions& options, const std::set<std::string>& patterns, const std::string& path);

  // While a Folded lives, the scripted module computes with the adapted weights.
  class Folded {
   public:
    explicit Folded(const ScriptedAdapters& adapters);
    ~Folded();
    Folded(const Folded&) = delete;
    Folded& operator=(const Folded&) = delete;

   private:
    const ScriptedAdapters& adapters_;
  };

 private:
  // Where the scripted code reads a weight: a module and its attribute's name.
  struct Slot {
    torch::jit::Module owner;
    std::string attribute;
  };
  struct Adapted {
    at::Tensor weight;  // W, the mirror's (and the scripted module's) parameter
    at::Tensor a;       // lora_A.weight
    at::Tensor b;       // lora_B.weight
    std::vector<Slot> slots;
  };

  void set_slots(bool folded) const;

  std::vector<Adapted> adapted_;
  double scale_;
};

}  // namespace hpctrain::model
