// Images from a denoiser (model.name=unet): pure noise walked back through S of the schedule's T
// steps, by DDPM's ancestral sampler or DDIM's deterministic one, with classifier-free guidance.
// Image i draws its starting noise (and DDPM its noise at every step) from a generator seeded by
// (seed, i) alone, so an image is the same whichever rank, batch or rank count makes it (up to
// the last bits a batch of another size may round otherwise). Depends on model and ATen.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "hpctrain/model/model.h"
#include "hpctrain/model/noise_schedule.h"

namespace hpctrain::model {

enum class DiffusionSampler { kDdpm, kDdim };

struct DiffusionSampling {
  DiffusionSampler sampler = DiffusionSampler::kDdim;
  std::int64_t steps = 50;  // S <= T, spaced evenly over the schedule
  double guidance = 1.0;    // g: noise = uncond + g (cond - uncond); 1: conditional alone, 0: unconditional
  std::uint64_t seed = 0;
  // Each predicted clean image is clamped to [low, high] (the data's range in normalized units).
  double low = -1.0;
  double high = 1.0;
};

// The S steps a sampler visits, from the noisiest down: T-1 first, 0 last.
std::vector<std::int64_t> sampling_steps(std::int64_t schedule_steps, std::int64_t steps);

// Images [B, ...shape] in the model's normalized units, for classes `labels` (-1: no class) and
// image numbers `images` (their generators' streams). The model must be in eval mode on `device`.
at::Tensor sample_images(Model& model, const NoiseSchedule& schedule, const DiffusionSampling& options,
                         const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& labels,
                         const std::vector<std::int64_t>& images, c10::Device device);

}  // namespace hpctrain::model
