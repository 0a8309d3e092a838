#include "rotary.h"

#include <torch/torch.h>

#include <cmath>

namespace hpctrain::model {
namespace {

// Llama 3.1's frequency rescaling (rope_type "llama3"): wavelengths longer than the original
// context / low_freq_factor are slowed by `factor`, those shorter than context / high_freq_factor
// kept, and the band between blended linearly in context / wavelength.
at::Tensor llama3_scaled(const at::Tensor& inverse, const config::Llama3RopeScaling& s) {
  const double context = static_cast<double>(s.original_max_positions);
  const double low_freq_wavelength = context / s.low_freq_factor;
  const double high_freq_wavelength = context / s.high_freq_factor;
  const at::Tensor wavelength = inverse.reciprocal().mul(2 * M_PI);
  at::Tensor scaled = torch::where(wavelength > low_freq_wavelength, inverse / s.factor, inverse);
  const at::Tensor smooth = (wavelength.reciprocal().mul(context) - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
  const at::Tensor blended = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const at::Tensor medium = wavelength.ge(high_freq_wavelength).logical_and(wavelength.le(low_freq_wavelength));
  return torch::where(medium, blended, scaled);
}

}  // namespace

at::Tensor rotary_inverse_frequencies(std::int64_t head_dim, double theta, const config::Llama3RopeScaling& scaling) {
  const at::Tensor exponents = torch::arange(0, head_dim, 2, torch::kLong).to(torch::kFloat) / head_dim;
  const at::Tensor inverse = torch::pow(theta, exponents).reciprocal();
  return scaling.enabled ? llama3_scaled(inverse, scaling) : inverse;
}

namespace {

// Angles of `positions` (any shape, on the CPU) with a last dimension of head_dim added.
RotaryAngles angles_of(const at::Tensor& inverse_frequencies, const at::Tensor& positions, at::ScalarType dtype,
                       at::Device device) {
  const at::Tensor angles = positions.to(torch::kFloat).unsqueeze(-1) * inverse_frequencies;
  const at::Tensor both_halves = torch::cat({angles, angles}, -1).to(device);
  return {both_halves.cos().to(dtype), both_halves.sin().to(dtype)};
}

}  // namespace

RotaryAngles rotary_angles(const at::Tensor& inverse_frequencies, std::int64_t first, std::int64_t count,
                           at::ScalarType dtype, at::Device device) {
  return angles_of(inverse_frequencies, torch::arange(first, first + count, torch::kLong), dtype, device);
}

RotaryAngles rotary_angles(const at::Tensor& inverse_frequencies, const at::Tensor& positions, at::ScalarType dtype,
                           at::Device device) {
  return angles_of(inverse_frequencies, positions.to(at::kCPU).unsqueeze(1), dtype, device);
}

at::Tensor rotate(const at::Tensor& x, const RotaryAngles& angles) {
  const std::int64_t half = x.size(-1) / 2;
  const at::Tensor rotated_half = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * angles.cos + rotated_half * angles.sin;
}

}  // namespace hpctrain::model
