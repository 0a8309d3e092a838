// MultiTensorAdamW against torch::torch_optim::AdamW: the same parameters, gradients and learning rates
// give the same parameters and optimizer state, step after step, with each kernel this libtorch
// has, on the CPU and on a GPU when there is one.
#include <gtest/gtest.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "hpctrain/config/config.h"
#include "hpctrain/optim/multi_tensor_adamw.h"
#include "hpctrain/optim/optimizer.h"
#include "hpctrain/optim/train_state.h"

namespace hpctrain::optim {
namespace {

namespace torch_optim = torch::optim;

// Parameters 0, 2 and 4 decay, 1 and 3 do not: two groups, as make_optimizer builds them.
const std::vector<std::string> kNamesInOptimizerOrder{"p0", "p2", "p4", "p1", "p3"};

template <typename Adam>
std::unique_ptr<Adam> two_groups(const std::vector<at::Tensor>& p, bool amsgrad) {
  const auto options = torch_optim::AdamWOptions(0.01).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1).amsgrad(amsgrad);
  std::vector<torch_optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{p[0], p[2], p[4]}, std::make_unique<torch_optim::AdamWOptions>(options));
  auto no_decay = std::make_unique<torch_optim::AdamWOptions>(options);
  no_decay->weight_decay(0.0);
  groups.emplace_back(std::vector<at::Tensor>{p[1], p[3]}, std::move(no_decay));
  return std::make_unique<Adam>(std::move(groups), options);
}

std::vector<at::Tensor> random_parameters(const c10::Device& device) {
  std::vector<at::Tensor> out;
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{{64, 33}, {33}, {7, 3, 5}, {5}, {1000}}) {
    out.push_back(torch::randn(shape).to(device));
  }
  return out;
}

struct Differences {
  double parameters = 0;  // the largest relative difference over the parameters
  double state = 0;       // over the moments
  bool steps_equal = true;
};

// Six steps of both optimizers on the same random gradients. Parameter 3 has no gradient at step
// 2, so its step count falls behind the others' (a batch of its own); the learning rate changes
// at step 3.
Differences compare(const c10::Device& device, std::optional<MultiTensorKernel> kernel, bool amsgrad = false,
                    std::int64_t chunk_elements = 0) {
  torch::manual_seed(11);
  const std::vector<at::Tensor> reference = random_parameters(device);
  std::vector<at::Tensor> ours;
  for (const auto& t : reference) ours.push_back(t.clone());
  auto expected = two_groups<torch_optim::AdamW>(reference, amsgrad);
  auto actual = two_groups<MultiTensorAdamW>(ours, amsgrad);
  if (kernel) actual->force_kernel(*kernel);
  if (chunk_elements > 0) actual->set_chunk_elements(chunk_elements);
  for (int step = 1; step <= 6; ++step) {
    if (step == 3) {
      for (torch_optim::Optimizer* optimizer : std::vector<torch_optim::Optimizer*>{expected.get(), actual.get()}) {
        for (auto& group : optimizer->param_groups()) group.options().set_lr(0.003);
      }
    }
    for (size_t i = 0; i < reference.size(); ++i) {
      const bool missing = step == 2 && i == 3;
      const at::Tensor grad = torch::randn(reference[i].sizes()).to(device);
      reference[i].mutable_grad() = missing ? at::Tensor() : grad.clone();
      ours[i].mutable_grad() = missing ? at::Tensor() : grad.clone();
    }
    expected->step();
    actual->step();
  }
  Differences run;
  const auto relative = [](const at::Tensor& a, const at::Tensor& b) {
    return ((a - b).norm() / b.norm()).item<double>();
  };
  for (size_t i = 0; i < reference.size(); ++i) {
    run.parameters = std::max(run.parameters, relative(ours[i], reference[i]));
  }
  const ckpt::NamedTensors theirs = optimizer_state(*expected, kNamesInOptimizerOrder);
  const ckpt::NamedTensors mine = optimizer_state(*actual, kNamesInOptimizerOrder);
  EXPECT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < std::min(mine.size(), theirs.size()); ++i) {
    EXPECT_EQ(mine[i].first, theirs[i].first);
    if (mine[i].first.find("/step") != std::string::npos) {
      run.steps_equal = run.steps_equal && mine[i].second.item<std::int64_t>() == theirs[i].second.item<std::int64_t>();
    } else {
      run.state = std::max(run.state, relative(mine[i].second, theirs[i].second));
    }
  }
  return run;
}

// Parameters and moments within `tolerance` of AdamW's, and the same step counts.
void expect_close(const Differences& run, double tolerance) {
  EXPECT_LT(run.parameters, tolerance);
  EXPECT_LT(run.state, tolerance);
  EXPECT_TRUE(run.steps_equal);
}

TEST(MultiTensorAdamW, ForeachKernelsComputeWhatAdamWComputes) {
  expect_close(compare(c10::Device(c10::kCPU), MultiTensorKernel::kForeach), 1e-6);
}

TEST(MultiTensorAdamW, ForeachKernelsInChunksComputeTheSame) {
  // 1000 elements a chunk: the 64x33 matrix and the 1000-vector alone, the small ones together.
  expect_close(compare(c10::Device(c10::kCPU), MultiTensorKernel::kForeach, false, 1000), 1e-6);
}

TEST(MultiTensorAdamW, TheDefaultKernelOnTheCpuAgreesWithAdamW) {
  expect_close(compare(c10::Device(c10::kCPU), std::nullopt), 1e-5);
}

TEST(MultiTensorAdamW, AmsgradIsLeftToAdamW) {
  const Differences run = compare(c10::Device(c10::kCPU), MultiTensorKernel::kForeach, /*amsgrad=*/true);
  EXPECT_EQ(run.parameters, 0.0);
  EXPECT_EQ(run.state, 0.0);
  EXPECT_TRUE(run.steps_equal);
}

TEST(MultiTensorAdamW, EachKernelOnAGpuAgreesWithAdamW) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  const c10::Device gpu(c10::kCUDA, 0);
  for (const MultiTensorKernel kernel : {MultiTensorKernel::kForeach, MultiTensorAdamW::kernel_for(gpu)}) {
    SCOPED_TRACE(kernel == MultiTensorKernel::kFused ? "fused kernel" : "foreach kernels");
    expect_close(compare(gpu, kernel), 1e-5);
  }
}

TEST(MultiTensorAdamW, MakeOptimizerPicksItWithOptimFused) {
  config::OptimConfig config;
  config.name = config::OptimizerName::kAdamW;
  config.lr = 0.01;
  config.beta1 = 0.9;
  config.beta2 = 0.999;
  config.eps = 1e-8;
  const NamedParameters parameters{{"w", torch::randn({3, 3})}};
  config.fused = true;
  EXPECT_NE(dynamic_cast<MultiTensorAdamW*>(make_optimizer(config, parameters).get()), nullptr);
  config.fused = false;
  auto plain = make_optimizer(config, parameters);
  EXPECT_EQ(dynamic_cast<MultiTensorAdamW*>(plain.get()), nullptr);
  EXPECT_NE(dynamic_cast<torch_optim::AdamW*>(plain.get()), nullptr);
}

}  // namespace
}  // namespace hpctrain::optim
