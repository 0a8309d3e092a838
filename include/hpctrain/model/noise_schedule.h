// DDPM's forward process (Ho et al. 2020): T noise levels, step t adding noise of variance beta_t,
// so that a clean image x0 at step t is x_t = sqrt(alpha_bar_t) x0 + sqrt(1 - alpha_bar_t) noise,
// alpha_bar_t = prod over s <= t of (1 - beta_s). Training draws t and the noise; sampling walks
// the steps back. Depends on config and ATen.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "hpctrain/config/config.h"

namespace hpctrain::model {

class NoiseSchedule {
 public:
  // linear: betas evenly from 1e-4 to 0.02, both scaled by 1000 / steps (so that any T ends as
  // noisy as DDPM's 1,000 steps); cosine: alpha_bar a squared cosine (Nichol and Dhariwal 2021).
  // Betas are at most 0.999.
  NoiseSchedule(config::NoiseSchedule kind, std::int64_t steps);

  std::int64_t steps() const { return static_cast<std::int64_t>(betas_.size()); }
  const std::vector<double>& betas() const { return betas_; }
  const std::vector<double>& alpha_bar() const { return alpha_bar_; }

  // x_t for clean images [B, ...] at steps [B] (int64), with `noise` of their shape; float32, on
  // the images' device.
  at::Tensor add_noise(const at::Tensor& clean, const at::Tensor& noise, const at::Tensor& steps) const;

 private:
  std::vector<double> betas_;
  std::vector<double> alpha_bar_;
  // alpha_bar_ as a tensor on the device add_noise last ran on: made once, not per batch.
  mutable at::Tensor alpha_bar_on_device_;
};

// One CPU generator per sample, from its seed.
std::vector<at::Generator> sample_generators(const std::vector<std::uint64_t>& seeds);
// [B, ...shape] of N(0, 1) on `device`, sample b's drawn from generators[b] alone: the same
// whatever batch the sample is in, or how many ranks share the batch.
at::Tensor per_sample_normal(std::vector<at::Generator>& generators, at::IntArrayRef shape, c10::Device device);

}  // namespace hpctrain::model
