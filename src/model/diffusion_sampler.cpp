#include "hpctrain/model/diffusion_sampler.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "hpctrain/core/counter_rng.h"
#include "hpctrain/core/error.h"

namespace hpctrain::model {
namespace {

// One generator per image, from (seed, image index): an image draws the same noise at every step
// whatever batch, and whichever rank, it is sampled in.
std::vector<at::Generator> image_generators(std::uint64_t seed, const std::vector<std::int64_t>& images) {
  std::vector<std::uint64_t> seeds;
  for (const std::int64_t image : images) {
    seeds.push_back(splitmix64(splitmix64(seed ^ 0x5A3B1EULL) ^ static_cast<std::uint64_t>(image)));
  }
  return sample_generators(seeds);
}

// The guided noise prediction at step t.
at::Tensor predict(Model& model, const at::Tensor& x, std::int64_t t, const at::Tensor& labels, double guidance) {
  const at::Tensor steps = at::full({x.size(0)}, t, labels.options());
  if (guidance == 1.0) return model.predict_noise(x, steps, labels);
  const at::Tensor none = at::full_like(labels, -1);
  const at::Tensor unconditional = model.predict_noise(x, steps, none);
  if (guidance == 0.0) return unconditional;
  return unconditional + guidance * (model.predict_noise(x, steps, labels) - unconditional);
}

}  // namespace

std::vector<std::int64_t> sampling_steps(std::int64_t schedule_steps, std::int64_t steps) {
  HT_CHECK(steps >= 1 && steps <= schedule_steps, "sampling steps must be in [1, the schedule's steps]");
  std::vector<std::int64_t> out;
  for (std::int64_t i = steps - 1; i >= 0; --i) {
    // Evenly spaced from 0 to T-1, both included (one step: T-1).
    const double at = steps == 1 ? static_cast<double>(schedule_steps - 1)
                                 : static_cast<double>(i) * static_cast<double>(schedule_steps - 1) /
                                       static_cast<double>(steps - 1);
    out.push_back(static_cast<std::int64_t>(std::llround(at)));
  }
  return out;
}

at::Tensor sample_images(Model& model, const NoiseSchedule& schedule, const DiffusionSampling& options,
                         const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& labels,
                         const std::vector<std::int64_t>& images, c10::Device device) {
  HT_CHECK(labels.size() == images.size(), "one class per image");
  const c10::AutoGradMode no_grad(false);
  std::vector<at::Generator> generators = image_generators(options.seed, images);
  const at::Tensor classes = at::tensor(labels, at::kLong).to(device);
  at::Tensor x = per_sample_normal(generators, shape, device);
  const std::vector<std::int64_t> visited = sampling_steps(schedule.steps(), options.steps);
  const std::vector<double>& alpha_bar = schedule.alpha_bar();
  for (std::size_t i = 0; i < visited.size(); ++i) {
    const std::int64_t t = visited[i];
    const double now = alpha_bar[static_cast<std::size_t>(t)];
    const double before = i + 1 < visited.size() ? alpha_bar[static_cast<std::size_t>(visited[i + 1])] : 1.0;
    const at::Tensor eps = predict(model, x, t, classes, options.guidance).to(at::kFloat);
    const at::Tensor clean = ((x - std::sqrt(1 - now) * eps) / std::sqrt(now)).clamp(options.low, options.high);
    if (options.sampler == DiffusionSampler::kDdim) {  // eta = 0: the noise direction kept, none added
      const at::Tensor direction = (x - std::sqrt(now) * clean) / std::sqrt(1 - now);
      x = std::sqrt(before) * clean + std::sqrt(1 - before) * direction;
      continue;
    }
    // DDPM's posterior q(x_before | x_t, clean) over the visited steps' own beta.
    const double beta = 1 - now / before;
    const double mean_clean = std::sqrt(before) * beta / (1 - now);
    const double mean_x = std::sqrt(1 - beta) * (1 - before) / (1 - now);
    x = mean_clean * clean + mean_x * x;
    // Drawn at every step, so the streams stay aligned.
    const at::Tensor z = per_sample_normal(generators, shape, device);
    if (i + 1 < visited.size()) x = x + std::sqrt(beta * (1 - before) / (1 - now)) * z;
  }
  return x;
}

}  // namespace hpctrain::model
