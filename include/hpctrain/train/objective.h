// What training minimizes, per sample (train.objective): the cross-entropy of a classifier's or a
// language model's logits, or DDPM's diffusion objective for a denoiser (model.name=unet): the
// mean squared error between the noise added to a clean image at a random step and the noise the
// model sees there (docs/diffusion.md). Step, evaluation and the memory probe run the model
// through it. Depends on config, data (Batch), model and ATen.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "hpctrain/config/config.h"
#include "hpctrain/data/split.h"

namespace hpctrain::model {
class Model;
}

namespace hpctrain::train {

// What the model computed for a batch and what that is scored against.
struct Prediction {
  at::Tensor output;  // logits [B, C] or [B, T, V]; predicted noise [B, ...]
  at::Tensor target;  // labels [B] or tokens [B, T]; the noise that was added
};

class Objective {
 public:
  virtual ~Objective() = default;
  // Runs the model's forward on `batch` (finished, on the model's device), under the caller's
  // autocast. In train mode a denoiser's classes are dropped (model.cond_drop); in eval mode not.
  virtual Prediction predict(model::Model& model, const data::Batch& batch) const = 0;
  // Float32 losses [B], one per sample.
  virtual at::Tensor per_sample_loss(const Prediction& prediction) const = 0;
  // Whether evaluation scores top-1 accuracy (classifiers and language models) besides the loss.
  virtual bool has_accuracy() const = 0;
};

// train.objective's, with its options. Throws ConfigError for a model it cannot train.
std::unique_ptr<Objective> make_objective(const config::Config& config);

}  // namespace hpctrain::train
