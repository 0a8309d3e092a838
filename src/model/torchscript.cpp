// model.name=torchscript: a module scripted in Python and saved with torch.jit.save, trained as it
// is. Note [Scripted parameters]: its parameters and buffers are registered, under the same dotted
// names, on a tree of torch::nn::Modules that mirrors the scripted module's submodules; they are
// the same tensors, so the optimizer, GradSync, checkpoints and `ckpt export` see them as they see
// a built-in model's (names as in the Python module's state_dict), and moving the tree to a device
// (nn::Module::to sets each tensor's data in place) moves the scripted module's too. train()/eval()
// reach the scripted module (a traced one has its train or eval behaviour baked in). What the rest
// of hpctrain cannot train is refused when the module is loaded: parameters other than float32,
// buffers of a dtype checkpoints cannot store. A parameter held under two names (tied weights) is
// registered once, under the first; tied_parameters() names the second, which checkpoints add.
// LoRA adapters (model.lora_rank) are folded into the weights for each forward (scripted_lora.h).
#include <torch/script.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "builtin_models.h"
#include "hpctrain/core/error.h"
#include "scripted_lora.h"

namespace hpctrain::model {
namespace {

// The line of a TorchScript error that says what went wrong: the interpreter's message starts with
// a header and a traceback and ends with "RuntimeError: ..."; c10's first line is its message.
std::string reason(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const size_t error_line = text.rfind("Error: ");
  if (error_line != std::string::npos && text.find("TorchScript interpreter") != std::string::npos) {
    const size_t start = text.rfind('\n', error_line);
    text = text.substr(start == std::string::npos ? 0 : start + 1);
  }
  return text.substr(0, text.find('\n'));
}

class ScriptedModule : public torch::nn::Module {
 public:
  ScriptedModule(torch::jit::Module scripted, const std::string& path) : scripted_(std::move(scripted)) {
    std::map<const void*, std::string> first_name;  // tensor -> the name it was registered under
    for (const auto& p : scripted_.named_parameters(/*recurse=*/true)) {
      const auto [it, fresh] = first_name.emplace(p.value.unsafeGetTensorImpl(), p.name);
      if (!fresh) {
        tied_.push_back({p.name, it->second, p.value});
        continue;
      }
      if (p.value.scalar_type() != at::kFloat) {
        throw ConfigError("model.path=" + path + ": parameter '" + p.name + "' is " + c10::toString(p.value.scalar_type()) +
                          "; save the module in float32 (train.precision=bf16 casts during training)");
      }
      auto [owner, leaf] = owner_of(p.name);
      owner->register_parameter(leaf, p.value, p.value.requires_grad());
    }
    for (const auto& b : scripted_.named_buffers(/*recurse=*/true)) {
      const at::ScalarType type = b.value.scalar_type();
      if (type != at::kFloat && type != at::kDouble && type != at::kLong && type != at::kInt && type != at::kByte) {
        throw ConfigError("model.path=" + path + ": buffer '" + b.name + "' is " + c10::toString(type) +
                          ", which checkpoints cannot store (float32/64, int64/32, uint8 can)");
      }
      auto [owner, leaf] = owner_of(b.name);
      owner->register_buffer(leaf, b.value);
    }
  }

  void train(bool on = true) override {
    torch::nn::Module::train(on);
    scripted_.train(on);
  }

  torch::jit::IValue call(const at::Tensor& input) {
    if (!adapters_) return scripted_.forward({input});
    const ScriptedAdapters::Folded folded(*adapters_);
    return scripted_.forward({input});
  }
  const std::vector<TiedParameter>& tied() const { return tied_; }

  void add_adapters(const LoraOptions& options, const std::set<std::string>& patterns, const std::string& path) {
    adapters_ = std::make_unique<ScriptedAdapters>(scripted_, *this, tied_, options, patterns, path);
  }

 private:
  // The module of the mirror tree that holds "a.b.c" (a.b, created on the way) and "c".
  std::pair<torch::nn::Module*, std::string> owner_of(const std::string& dotted) {
    torch::nn::Module* owner = this;
    std::string rest = dotted;
    for (size_t dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
      const std::string part = rest.substr(0, dot);
      rest = rest.substr(dot + 1);
      std::shared_ptr<torch::nn::Module> child;
      for (const auto& named : owner->named_children()) {
        if (named.key() == part) child = named.value();
      }
      if (!child) child = owner->register_module(part, std::make_shared<torch::nn::Module>());
      owner = child.get();
    }
    return {owner, rest};
  }

  torch::jit::Module scripted_;
  std::vector<TiedParameter> tied_;
  std::unique_ptr<ScriptedAdapters> adapters_;  // model.lora_rank's, folded into the weights per forward
};

class TorchScriptModel : public Model {
 public:
  TorchScriptModel(std::shared_ptr<ScriptedModule> module, std::string path)
      : module_(std::move(module)), path_(std::move(path)) {}

  at::Tensor forward(const at::Tensor& input) override {
    try {
      return module_->call(input).toTensor();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {  // the module's own failure, in one line
      throw ConfigError("model.path=" + path_ + ": forward failed on a batch of shape " + c10::str(input.sizes()) +
                        " on " + input.device().str() + ": " + reason(e));
    }
  }
  torch::nn::Module& module() override { return *module_; }
  std::vector<TiedParameter> tied_parameters() const override { return module_->tied(); }
  bool add_adapters(const LoraOptions& options, const std::set<std::string>& patterns) override {
    module_->add_adapters(options, patterns, path_);
    return true;
  }

 private:
  std::shared_ptr<ScriptedModule> module_;
  std::string path_;
};

}  // namespace

std::shared_ptr<Model> make_torchscript(const config::ModelConfig& config, const ModelSpec& spec) {
  const std::string& path = config.path;
  if (path.empty()) {
    throw ConfigError("model.name=torchscript needs model.path=FILE.pt, a module saved in Python with "
                      "torch.jit.save(torch.jit.script(model), 'FILE.pt')");
  }
  if (!std::filesystem::is_regular_file(path)) throw ConfigError("model.path=" + path + ": no such file");
  torch::jit::Module scripted;
  try {
    scripted = torch::jit::load(path, torch::kCPU);
  } catch (const std::exception& e) {
    throw ConfigError("model.path=" + path + " is not a TorchScript file this libtorch can load (" + reason(e) +
                      "); save it with torch.jit.save");
  }
  auto module = std::make_shared<ScriptedModule>(std::move(scripted), path);
  bool trainable = false;
  for (const auto& p : module->parameters()) trainable = trainable || p.requires_grad();
  if (!trainable) throw ConfigError("model.path=" + path + ": the module has no parameter to train");

  // One forward of two zero samples in eval mode, without gradients, so a module that does not fit
  // the data fails here in one line, not mid-run. The buffers are put back afterwards: a traced
  // module may update BatchNorm statistics even in eval mode.
  std::vector<at::Tensor> saved;
  for (const auto& b : module->buffers()) saved.push_back(b.clone());
  std::vector<std::int64_t> batch_shape{2};
  batch_shape.insert(batch_shape.end(), spec.input_shape.begin(), spec.input_shape.end());
  // A classifier maps normalized float samples to logits [B, classes]; a language model maps
  // windows of token ids [B, T] to next-token logits [B, T, vocab].
  std::vector<std::int64_t> output_shape{2};
  if (spec.token_ids) output_shape.push_back(spec.input_shape.front());
  output_shape.push_back(spec.num_classes);
  const std::string what = spec.token_ids ? " int64 token ids" : " normalized float samples";
  const std::string expected = "logits " + c10::str(at::IntArrayRef(output_shape)) + " for a batch " +
                               c10::str(at::IntArrayRef(batch_shape)) + " of" + what;
  const at::Tensor zeros = torch::zeros(batch_shape, spec.token_ids ? at::kLong : at::kFloat);
  module->eval();
  torch::jit::IValue result;
  {
    const torch::NoGradGuard no_grad;
    try {
      result = module->call(zeros);
    } catch (const std::exception& e) {
      throw ConfigError("model.path=" + path + ": forward fails on " + c10::str(at::IntArrayRef(batch_shape)) +
                        (spec.token_ids ? " token ids (" : " samples (") + reason(e) + "); " +
                        (spec.token_ids ? "a model for a token stream" : "it") + " must return " + expected);
    }
    size_t i = 0;
    for (auto& b : module->buffers()) b.copy_(saved[i++]);
  }
  module->train();
  if (!result.isTensor()) {
    throw ConfigError("model.path=" + path + ": forward returns a " + result.tagKind() + "; it must return " + expected);
  }
  const at::Tensor out = result.toTensor();
  if (out.sizes() != at::IntArrayRef(output_shape)) {
    throw ConfigError("model.path=" + path + ": forward returns " + c10::str(out.sizes()) + "; it must return " +
                      expected + " (the dataset has " + std::to_string(spec.num_classes) +
                      (spec.token_ids ? " tokens in its vocabulary" : " classes") + ")");
  }
  return std::make_shared<TorchScriptModel>(std::move(module), path);
}

}  // namespace hpctrain::model
