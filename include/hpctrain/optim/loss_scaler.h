// Dynamic loss scaling (train.loss_scale; on by default with train.precision=fp16), as
// torch.cuda.amp.GradScaler does it. fp16's
// smallest normal number is 6e-5, so small gradients computed in it flush to zero: the loss is
// multiplied by scale() before backward, and once the gradients are averaged, unscale() divides
// them back and says whether any is inf or NaN. A step with one is skipped and the scale halved;
// after growth_interval good steps in a row it doubles. The allreduce gives every rank the same
// averaged gradients, bit for bit (as PyTorch DDP assumes too), so every rank decides alike.
// Depends on ATen, config and ckpt (for the checkpoint's NamedTensors).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/config/config.h"

namespace hpctrain::optim {

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16, GradScaler's
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

// Whether `train` asks for loss scaling: train.loss_scale=dynamic, or auto with fp16.
bool uses_loss_scaling(const config::TrainConfig& train);

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  double scale() const { return scale_; }
  // Divides every defined gradient by scale(), in place. Returns false when any element is inf or
  // NaN (one device-to-host copy).
  bool unscale(const std::vector<at::Tensor>& gradients) const;
  // After each step: `finite` as unscale() said. A skipped step halves the scale.
  void update(bool finite);

  // {"scale", "good_steps"} for a checkpoint, and back (a resume continues the
  // growth count where it stopped). load_state throws CheckpointError when an entry is not a
  // scalar or the scale is missing, not finite or not positive.
  ckpt::NamedTensors state() const;
  void load_state(const ckpt::NamedTensors& stored);

 private:
  LossScalerOptions options_;
  double scale_;
  std::int64_t good_steps_ = 0;  // finite steps since the scale last changed
};

}  // namespace hpctrain::optim
