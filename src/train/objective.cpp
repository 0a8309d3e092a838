#include "hpctrain/train/objective.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "hpctrain/core/counter_rng.h"
#include "hpctrain/core/error.h"
#include "hpctrain/model/model.h"
#include "hpctrain/model/noise_schedule.h"
#include "hpctrain/train/step_loss.h"

namespace hpctrain::train {
namespace {

class CrossEntropy final : public Objective {
 public:
  explicit CrossEntropy(double label_smoothing) : label_smoothing_(label_smoothing) {}

  Prediction predict(model::Model& model, const data::Batch& batch) const override {
    return {model.forward(batch.input), batch.target};
  }
  at::Tensor per_sample_loss(const Prediction& prediction) const override {
    return train::per_sample_loss(prediction.output, prediction.target, label_smoothing_);
  }
  bool has_accuracy() const override { return true; }

 private:
  double label_smoothing_;
};

// What a sample draws from its key (data/sample_keys.h); the constants tell the draws apart.
std::uint64_t draw(std::int64_t key, std::uint64_t which) { return splitmix64(static_cast<std::uint64_t>(key) ^ which); }
constexpr std::uint64_t kStepDraw = 0x57E9ULL;
constexpr std::uint64_t kNoiseDraw = 0x7015EULL;
constexpr std::uint64_t kDropDraw = 0xD80FULL;

class Diffusion final : public Objective {
 public:
  explicit Diffusion(const config::Config& config)
      : schedule_(config.diffusion.schedule, config.diffusion.steps), cond_drop_(config.model.cond_drop) {}

  Prediction predict(model::Model& model, const data::Batch& batch) const override {
    HT_CHECK(batch.keys.defined(), "train.objective=diffusion draws from each sample's key; the batch has none");
    const c10::Device device = batch.input.device();
    const at::Tensor keys = batch.keys.contiguous();
    const auto* key = keys.data_ptr<std::int64_t>();
    const std::int64_t count = keys.size(0);
    std::vector<std::int64_t> steps(static_cast<std::size_t>(count));
    std::vector<std::uint64_t> noise_seeds(static_cast<std::size_t>(count));
    std::vector<std::uint8_t> dropped(static_cast<std::size_t>(count));
    for (std::int64_t b = 0; b < count; ++b) {
      const auto i = static_cast<std::size_t>(b);
      steps[i] = static_cast<std::int64_t>(draw(key[b], kStepDraw) % static_cast<std::uint64_t>(schedule_.steps()));
      noise_seeds[i] = draw(key[b], kNoiseDraw);
      const double uniform = static_cast<double>(draw(key[b], kDropDraw) >> 11) * 0x1.0p-53;
      dropped[i] = uniform < cond_drop_ ? 1 : 0;
    }
    const at::Tensor step_tensor = at::tensor(steps, at::kLong).to(device);
    std::vector<at::Generator> generators = model::sample_generators(noise_seeds);
    const at::Tensor noise_tensor = model::per_sample_normal(generators, batch.input.sizes().slice(1), device);
    at::Tensor labels = batch.target;
    if (model.module().is_training() && cond_drop_ > 0) {
      const at::Tensor drop = at::tensor(dropped, at::kByte).to(at::kBool).to(device);
      labels = at::where(drop, at::full_like(labels, -1), labels);
    }
    const at::Tensor noisy = schedule_.add_noise(batch.input, noise_tensor, step_tensor);
    return {model.predict_noise(noisy, step_tensor, labels), noise_tensor};
  }

  at::Tensor per_sample_loss(const Prediction& prediction) const override {
    return (prediction.output.to(at::kFloat) - prediction.target).pow(2).flatten(1).mean(1);
  }
  bool has_accuracy() const override { return false; }

 private:
  model::NoiseSchedule schedule_;
  double cond_drop_;
};

}  // namespace

std::unique_ptr<Objective> make_objective(const config::Config& config) {
  const bool denoiser = config.model.name == config::ModelName::kUnet;
  if (config.train.objective == config::Objective::kDiffusion) {
    if (!denoiser) {
      throw ConfigError(std::string("train.objective=diffusion trains a denoiser, and model.name=") +
                        config::name_of(config.model.name) + " is not one: use model.name=unet");
    }
    if (config.train.label_smoothing > 0) {
      throw ConfigError("train.label_smoothing smooths a classifier's labels; train.objective=diffusion has "
                        "none: set it to 0");
    }
    return std::make_unique<Diffusion>(config);
  }
  if (denoiser) {
    throw ConfigError("model.name=unet predicts noise and trains with train.objective=diffusion, not " +
                      std::string(config::name_of(config.train.objective)));
  }
  return std::make_unique<CrossEntropy>(config.train.label_smoothing);
}

}  // namespace hpctrain::train
