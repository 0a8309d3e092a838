#include "hpctrain/optim/train_state.h"

#include <ATen/Context.h>
#include <torch/optim.h>

#include <map>
#include <mutex>
#include <utility>

#include "hpctrain/core/error.h"
#include "optimizer_state_key.h"

namespace hpctrain::optim {
namespace {

namespace torch_optim = torch::optim;

std::vector<at::Tensor> parameters_of(const torch_optim::Optimizer& optimizer) {
  std::vector<at::Tensor> out;
  for (const auto& group : optimizer.param_groups()) {
    out.insert(out.end(), group.params().begin(), group.params().end());
  }
  return out;
}

at::Tensor step_tensor(std::int64_t step) { return at::full({}, step, at::kLong); }

}  // namespace

ckpt::NamedTensors optimizer_state(torch_optim::Optimizer& optimizer, const std::vector<std::string>& names) {
  const std::vector<at::Tensor> parameters = parameters_of(optimizer);
  HT_CHECK(parameters.size() == names.size(), "one name per optimizer parameter");
  auto& states = optimizer.state();
  ckpt::NamedTensors out;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const auto found = states.find(optimizer_state_key(states, parameters[i]));
    if (found == states.end()) continue;
    const std::string& name = names[i];
    if (auto* adamw = dynamic_cast<torch_optim::AdamWParamState*>(found->second.get())) {
      out.emplace_back(name + "/step", step_tensor(adamw->step()));
      out.emplace_back(name + "/exp_avg", adamw->exp_avg());
      out.emplace_back(name + "/exp_avg_sq", adamw->exp_avg_sq());
      if (adamw->max_exp_avg_sq().defined()) out.emplace_back(name + "/max_exp_avg_sq", adamw->max_exp_avg_sq());
    } else if (auto* sgd = dynamic_cast<torch_optim::SGDParamState*>(found->second.get())) {
      if (sgd->momentum_buffer().defined()) out.emplace_back(name + "/momentum_buffer", sgd->momentum_buffer());
    } else {
      throw CheckpointError("the optimizer's state of " + name + " is of a kind checkpoints cannot store yet");
    }
  }
  return out;
}

void load_optimizer_state(torch_optim::Optimizer& optimizer, const std::vector<std::string>& names,
                          const ckpt::NamedTensors& stored) {
  const std::vector<at::Tensor> parameters = parameters_of(optimizer);
  HT_CHECK(parameters.size() == names.size(), "one name per optimizer parameter");
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < names.size(); ++i) index[names[i]] = i;
  // parameter -> state name -> tensor
  std::map<std::string, std::map<std::string, at::Tensor>> by_parameter;
  for (const auto& [key, tensor] : stored) {
    const auto slash = key.rfind('/');
    const std::string parameter = key.substr(0, slash);
    if (slash == std::string::npos || index.count(parameter) == 0) {
      throw CheckpointError("optimizer state '" + key + "' belongs to no parameter of this model");
    }
    by_parameter[parameter][key.substr(slash + 1)] = tensor;
  }
  const bool adamw = dynamic_cast<torch_optim::AdamW*>(&optimizer) != nullptr;
  auto& states = optimizer.state();
  auto made_ahead = std::exchange(states, {});  // allocate_optimizer_state's, filled in place below
  for (auto& entry : by_parameter) {
    // Named, not a structured binding: the lambda below captures them, which C++17 does not allow
    // for structured bindings (GCC accepts it, clang does not).
    const std::string& parameter = entry.first;
    auto& state = entry.second;
    const at::Tensor& target = parameters[index[parameter]];
    const auto on_device = [&](const char* what) {
      const auto found = state.find(what);
      if (found == state.end() || found->second.sizes() != target.sizes()) {
        throw CheckpointError("optimizer state of " + parameter + " has no " + what + " of shape " +
                              c10::str(target.sizes()) + " (a checkpoint of another optimizer? see optim.name)");
      }
      return found->second.to(target.options());
    };
    if (adamw) {
      if (state.count("step") == 0) throw CheckpointError("optimizer state of " + parameter + " has no step");
      const auto key = optimizer_state_key(states, target);
      std::unique_ptr<torch_optim::OptimizerParamState>& kept = made_ahead[key];
      auto* restored = dynamic_cast<torch_optim::AdamWParamState*>(kept.get());
      // State made ahead (two flat buffers, kept out of the heap) keeps its memory: a resumed run
      // holds it as a fresh one does. AMSGrad's is never made ahead.
      const bool fill = restored != nullptr && state.count("max_exp_avg_sq") == 0;
      if (!fill) kept = std::make_unique<torch_optim::AdamWParamState>();
      restored = static_cast<torch_optim::AdamWParamState*>(kept.get());
      restored->step(ckpt::stored_count(state.at("step"), "optimizer state " + parameter + "/step"));
      if (fill) {
        restored->exp_avg().copy_(on_device("exp_avg"));
        restored->exp_avg_sq().copy_(on_device("exp_avg_sq"));
      } else {
        restored->exp_avg(on_device("exp_avg"));
        restored->exp_avg_sq(on_device("exp_avg_sq"));
        if (state.count("max_exp_avg_sq") > 0) restored->max_exp_avg_sq(on_device("max_exp_avg_sq"));
      }
      states[key] = std::move(kept);
    } else {
      auto restored = std::make_unique<torch_optim::SGDParamState>();
      restored->momentum_buffer(on_device("momentum_buffer"));
      states[optimizer_state_key(states, target)] = std::move(restored);
    }
  }
}

void allocate_optimizer_state(torch_optim::Optimizer& optimizer,
                              const std::function<at::Tensor(std::int64_t, const at::TensorOptions&)>& allocate_zeros) {
  if (dynamic_cast<torch_optim::AdamW*>(&optimizer) == nullptr) return;
  for (const auto& group : optimizer.param_groups()) {
    // AMSGrad's running maximum is not made here: AdamW would find it missing.
    if (static_cast<const torch_optim::AdamWOptions&>(group.options()).amsgrad()) return;
  }
  const std::vector<at::Tensor> parameters = parameters_of(optimizer);
  if (parameters.empty()) return;
  std::int64_t total = 0;
  for (const at::Tensor& p : parameters) total += p.numel();
  const at::Tensor averages = allocate_zeros(total, parameters.front().options());
  const at::Tensor squares = allocate_zeros(total, parameters.front().options());
  auto& states = optimizer.state();
  std::int64_t offset = 0;
  for (const at::Tensor& p : parameters) {
    auto state = std::make_unique<torch_optim::AdamWParamState>();
    state->step(0);
    state->exp_avg(averages.narrow(0, offset, p.numel()).view(p.sizes()));
    state->exp_avg_sq(squares.narrow(0, offset, p.numel()).view(p.sizes()));
    states[optimizer_state_key(states, p)] = std::move(state);
    offset += p.numel();
  }
}

std::uint64_t rank_seed(std::int64_t seed, int rank, std::int64_t step) {
  return static_cast<std::uint64_t>(seed) * 1000003ULL + static_cast<std::uint64_t>(rank) + 1 +
         static_cast<std::uint64_t>(step) * 7919ULL;
}

ckpt::NamedTensors rng_state(const c10::Device& device) {
  ckpt::NamedTensors out;
  at::Generator cpu = at::globalContext().defaultGenerator(c10::Device(c10::kCPU));
  {
    const std::lock_guard<std::mutex> lock(cpu.mutex());
    out.emplace_back("cpu", cpu.get_state());
  }
  if (device.is_cuda()) {
    at::Generator gpu = at::globalContext().defaultGenerator(device);
    const std::lock_guard<std::mutex> lock(gpu.mutex());
    out.emplace_back("cuda", gpu.get_state());
  }
  return out;
}

void restore_rng_state(const c10::Device& device, const ckpt::NamedTensors& state) {
  for (const auto& [name, tensor] : state) {
    if (name != "cpu" && !(name == "cuda" && device.is_cuda())) continue;
    at::Generator generator =
        at::globalContext().defaultGenerator(name == "cpu" ? c10::Device(c10::kCPU) : device);
    const std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(tensor);
  }
}

}  // namespace hpctrain::optim
