#include "hpctrain/model/noise_schedule.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

#include "hpctrain/core/error.h"

namespace hpctrain::model {
namespace {

constexpr double kMaxBeta = 0.999;

std::vector<double> linear_betas(std::int64_t steps) {
  const double scale = 1000.0 / static_cast<double>(steps);
  const double first = scale * 1e-4;
  const double last = scale * 0.02;
  std::vector<double> betas(static_cast<std::size_t>(steps));
  for (std::int64_t t = 0; t < steps; ++t) {
    const double beta = first + (last - first) * static_cast<double>(t) / static_cast<double>(steps - 1);
    betas[static_cast<std::size_t>(t)] = std::min(beta, kMaxBeta);
  }
  return betas;
}

// beta_t = 1 - f(t + 1) / f(t), f(t) = cos^2(((t / T) + s) / (1 + s) * pi / 2), s = 0.008.
std::vector<double> cosine_betas(std::int64_t steps) {
  constexpr double kOffset = 0.008;
  const auto f = [&](std::int64_t t) {
    const double angle = (static_cast<double>(t) / static_cast<double>(steps) + kOffset) / (1 + kOffset) * M_PI / 2;
    return std::cos(angle) * std::cos(angle);
  };
  std::vector<double> betas(static_cast<std::size_t>(steps));
  for (std::int64_t t = 0; t < steps; ++t) betas[static_cast<std::size_t>(t)] = std::min(1 - f(t + 1) / f(t), kMaxBeta);
  return betas;
}

}  // namespace

NoiseSchedule::NoiseSchedule(config::NoiseSchedule kind, std::int64_t steps) {
  HT_CHECK(steps >= 2, "a noise schedule needs at least 2 steps");
  betas_ = kind == config::NoiseSchedule::kCosine ? cosine_betas(steps) : linear_betas(steps);
  double product = 1.0;
  for (const double beta : betas_) {
    product *= 1 - beta;
    alpha_bar_.push_back(product);
  }
}

at::Tensor NoiseSchedule::add_noise(const at::Tensor& clean, const at::Tensor& noise, const at::Tensor& steps) const {
  if (!alpha_bar_on_device_.defined() || alpha_bar_on_device_.device() != clean.device()) {
    alpha_bar_on_device_ = at::tensor(alpha_bar_, at::kDouble).to(clean.device());
  }
  const at::Tensor alpha_bar = alpha_bar_on_device_.index_select(0, steps.to(clean.device()));
  std::vector<std::int64_t> per_sample(static_cast<std::size_t>(clean.dim()), 1);
  per_sample[0] = clean.size(0);
  const at::Tensor signal = alpha_bar.sqrt().to(at::kFloat).view(per_sample);
  const at::Tensor spread = (1 - alpha_bar).sqrt().to(at::kFloat).view(per_sample);
  return signal * clean.to(at::kFloat) + spread * noise.to(at::kFloat);
}

std::vector<at::Generator> sample_generators(const std::vector<std::uint64_t>& seeds) {
  std::vector<at::Generator> generators;
  generators.reserve(seeds.size());
  for (const std::uint64_t seed : seeds) generators.push_back(at::detail::createCPUGenerator(seed));
  return generators;
}

at::Tensor per_sample_normal(std::vector<at::Generator>& generators, at::IntArrayRef shape, c10::Device device) {
  std::vector<at::Tensor> noise;
  noise.reserve(generators.size());
  for (at::Generator& generator : generators) noise.push_back(at::randn(shape, generator, at::kFloat));
  return at::stack(noise).to(device);
}

}  // namespace hpctrain::model
