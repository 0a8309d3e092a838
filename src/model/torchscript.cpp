// model.name=torchscript: a module scripted (or traced) in Python and saved with torch.jit.save,
// trained as it is. Note [Scripted parameters]: its parameters and buffers are registered, under
// the same dotted names, on a tree of torch::nn::Modules that mirrors the scripted module's
// submodules; they are the same tensors, so the optimizer, GradSync, checkpoints and `ckpt export`
// see them as they see a built-in model's (names as in the Python module's state_dict), and moving
// the tree to a device (nn::Module::to sets each tensor's data in place) moves the scripted
// module's too. train()/eval() reach the scripted module, whose forward runs every batch.
#include <torch/script.h>
#include <torch/torch.h>

#include <filesystem>
#include <sstream>

#include "builtin_models.h"
#include "hpctrain/core/error.h"

namespace hpctrain::model {
namespace {

class ScriptedModule : public torch::nn::Module {
 public:
  explicit ScriptedModule(torch::jit::Module scripted) : scripted_(std::move(scripted)) {
    for (const auto& p : scripted_.named_parameters(/*recurse=*/true)) {
      auto [owner, leaf] = owner_of(p.name);
      owner->register_parameter(leaf, p.value, p.value.requires_grad());
    }
    for (const auto& b : scripted_.named_buffers(/*recurse=*/true)) {
      auto [owner, leaf] = owner_of(b.name);
      owner->register_buffer(leaf, b.value);
    }
  }

  void train(bool on = true) override {
    torch::nn::Module::train(on);
    scripted_.train(on);
  }

  torch::jit::IValue call(const at::Tensor& input) { return scripted_.forward({input}); }
  at::Tensor forward(const at::Tensor& input) { return call(input).toTensor(); }

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
};

class TorchScriptModel : public Model {
 public:
  explicit TorchScriptModel(std::shared_ptr<ScriptedModule> module) : module_(std::move(module)) {}
  at::Tensor forward(const at::Tensor& input) override { return module_->forward(input); }
  torch::nn::Module& module() override { return *module_; }

 private:
  std::shared_ptr<ScriptedModule> module_;
};

std::string shape_of(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < sizes.size(); ++i) out << (i ? "," : "") << sizes[i];
  out << "]";
  return out.str();
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

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
  } catch (const c10::Error& e) {
    throw ConfigError("model.path=" + path + " is not a TorchScript file this libtorch can load (" +
                      first_line(e.what_without_backtrace()) + "); save it with torch.jit.save");
  }
  auto module = std::make_shared<ScriptedModule>(std::move(scripted));
  if (module->parameters().empty()) throw ConfigError("model.path=" + path + ": the module has no parameters to train");

  // One forward of two zero samples, in eval mode and without gradients (BatchNorm statistics
  // stay as saved), so a module that does not fit the data fails here in one line, not mid-run.
  std::vector<std::int64_t> batch_shape{2};
  batch_shape.insert(batch_shape.end(), spec.input_shape.begin(), spec.input_shape.end());
  const std::string expected = "logits [2, " + std::to_string(spec.num_classes) + "] for a batch " +
                               shape_of(batch_shape) + " of normalized float samples";
  module->eval();
  at::Tensor out;
  try {
    const torch::NoGradGuard no_grad;
    const torch::jit::IValue result = module->call(torch::zeros(batch_shape));
    if (!result.isTensor()) {
      throw ConfigError("model.path=" + path + ": forward returns a " + result.tagKind() + "; it must return " + expected);
    }
    out = result.toTensor();
  } catch (const c10::Error& e) {
    throw ConfigError("model.path=" + path + ": forward fails on " + shape_of(batch_shape) + " samples (" +
                      first_line(e.what_without_backtrace()) + "); it must return " + expected);
  }
  module->train();
  if (out.dim() != 2 || out.size(0) != 2 || out.size(1) != spec.num_classes) {
    throw ConfigError("model.path=" + path + ": forward returns " + shape_of(out.sizes()) + "; it must return " +
                      expected + " (the dataset has " + std::to_string(spec.num_classes) + " classes)");
  }
  return std::make_shared<TorchScriptModel>(std::move(module));
}

}  // namespace hpctrain::model
