#include "hpctrain/optim/multi_tensor_adamw.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <tuple>

#include "hpctrain/core/error.h"
#include "hpctrain/model/torch_version.h"
#include "optimizer_state_key.h"

namespace hpctrain::optim {
namespace {

namespace torch_optim = torch::optim;

// What AdamW::step does at a parameter's first step: step 0, zero moments.
template <typename States>
torch_optim::AdamWParamState& state_of(States& states, const at::Tensor& p) {
  auto& slot = states[optimizer_state_key(states, p)];
  if (!slot) {
    auto made = std::make_unique<torch_optim::AdamWParamState>();
    made->step(0);
    made->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
    made->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
    slot = std::move(made);
  }
  return static_cast<torch_optim::AdamWParamState&>(*slot);
}

}  // namespace

// On a CPU the _foreach_ operations: libtorch's fused CPU kernel rounds an element by where it
// lies in its vector, so a ZeRO rank's flat pieces would not match the replicated parameters bit
// for bit; there the update is bound by memory bandwidth either way.
MultiTensorKernel MultiTensorAdamW::kernel_for(const c10::Device& device) {
#if HT_TORCH_AT_LEAST(2, 1)
  return device.is_cuda() ? MultiTensorKernel::kFused : MultiTensorKernel::kForeach;
#else
  (void)device;
  return MultiTensorKernel::kForeach;
#endif
}

std::vector<MultiTensorAdamW::Batch> MultiTensorAdamW::batches_of(torch_optim::OptimizerParamGroup& group) {
  std::map<std::tuple<int, int, int, std::int64_t>, Batch> by_kind;  // device type and index, dtype, step
  for (const at::Tensor& p : group.params()) {
    if (!p.grad().defined()) continue;
    torch_optim::AdamWParamState& held = state_of(state(), p);
    held.step(held.step() + 1);
    Batch& batch = by_kind[{static_cast<int>(p.device().type()), p.device().index(), static_cast<int>(p.scalar_type()),
                            held.step()}];
    batch.step = held.step();
    batch.params.push_back(p);
    batch.grads.push_back(p.grad());
    batch.exp_avgs.push_back(held.exp_avg());
    batch.exp_avg_sqs.push_back(held.exp_avg_sq());
  }
  std::vector<Batch> out;
  for (auto& entry : by_kind) out.push_back(std::move(entry.second));
  return out;
}

void MultiTensorAdamW::update(const Batch& batch, const torch_optim::AdamWOptions& options) const {
  const MultiTensorKernel kernel = forced_.value_or(kernel_for(batch.params.front().device()));
  if (kernel == MultiTensorKernel::kFused) return update_fused(batch, options);
  // A chunk of tensors at a time: the foreach operations' temporaries are as large as the chunk.
  for (size_t first = 0, end = 0; first < batch.params.size(); first = end) {
    std::int64_t elements = batch.params[first].numel();
    for (end = first + 1; end < batch.params.size(); ++end) {
      if (elements + batch.params[end].numel() > chunk_elements_) break;
      elements += batch.params[end].numel();
    }
    const auto part = [&](const std::vector<at::Tensor>& list) {
      return at::TensorList(list).slice(first, end - first);
    };
    update_foreach(part(batch.params), part(batch.grads), part(batch.exp_avgs), part(batch.exp_avg_sqs), batch.step,
                   options);
  }
}

void MultiTensorAdamW::update_fused(const Batch& batch, const torch_optim::AdamWOptions& options) {
#if HT_TORCH_AT_LEAST(2, 1)
  const auto [beta1, beta2] = options.betas();
  // The kernel reads each parameter's step count from a tensor on its device; one shared by all.
  const at::Tensor step =
      at::full({}, static_cast<double>(batch.step), batch.params.front().options().dtype(at::kFloat));
  const std::vector<at::Tensor> steps(batch.params.size(), step);
  at::_fused_adamw_(batch.params, batch.grads, batch.exp_avgs, batch.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps,
                    options.lr(), beta1, beta2, options.weight_decay(), options.eps(), /*amsgrad=*/false,
                    /*maximize=*/false);
#else
  (void)batch;
  (void)options;
  HT_CHECK(false, "libtorch before 2.1 has no fused AdamW kernel");
#endif
}

// torch::optim::AdamW's arithmetic, in its order, over lists of tensors.
void MultiTensorAdamW::update_foreach(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                                      at::TensorList exp_avg_sqs, std::int64_t step,
                                      const torch_optim::AdamWOptions& options) {
  const double lr = options.lr();
  const auto [beta1, beta2] = options.betas();
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  if (options.weight_decay() != 0) at::_foreach_mul_(params, 1 - lr * options.weight_decay());
  at::_foreach_mul_(exp_avgs, beta1);
  at::_foreach_add_(exp_avgs, grads, 1 - beta1);
  at::_foreach_mul_(exp_avg_sqs, beta2);
  at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2);
  std::vector<at::Tensor> denominators = at::_foreach_sqrt(exp_avg_sqs);
  at::_foreach_div_(denominators, std::sqrt(bias_correction2));
  at::_foreach_add_(denominators, options.eps());
  at::_foreach_addcdiv_(params, exp_avgs, denominators, -lr / bias_correction1);
}

at::Tensor MultiTensorAdamW::step(LossClosure closure) {
  for (auto& group : param_groups()) {
    if (static_cast<const torch_optim::AdamWOptions&>(group.options()).amsgrad()) return torch_optim::AdamW::step(closure);
  }
  c10::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure) {
    c10::AutoGradMode enabled(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    const auto& options = static_cast<const torch_optim::AdamWOptions&>(group.options());
    for (Batch& batch : batches_of(group)) update(batch, options);
  }
  return loss;
}

}  // namespace hpctrain::optim
