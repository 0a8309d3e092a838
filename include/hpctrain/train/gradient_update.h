// How a step's gradients become new parameters: gathered over the ranks, checked, clipped and
// applied by the optimizer. Step (step.h) drives one of these and never branches on which.
// Replicated, today's and dist.zero_stage=0's: every rank averages all gradients (GradSync, in
// buckets during backward) and applies the whole optimizer step to its own copy. A sharded
// optimizer is another implementation, where each rank updates its slice. Depends on comm, ddp,
// config and the train module's LossScaler; torch::optim is forward-declared.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/config/config.h"
#include "hpctrain/train/loss_scaler.h"
#include "hpctrain/train/optimizer.h"

namespace hpctrain::comm {
class Communicator;
}  // namespace hpctrain::comm

namespace hpctrain::train {

class GradientUpdate {
 public:
  virtual ~GradientUpdate() = default;

  // Before a step's first backward: the gradients start from zero.
  virtual void zero_grad() = 0;
  // Before each backward of a step; `last_micro_batch`: it completes the step's gradients.
  virtual void begin_backward(bool last_micro_batch) = 0;
  // Collective: the step's gradients, summed over its backwards, averaged over the ranks.
  virtual void reduce_gradients() = 0;
  // True when no averaged gradient holds inf or NaN; with `scaler`, divides them by its scale first.
  // Every rank decides alike.
  virtual bool unscale_and_check(const LossScaler* scaler) = 0;
  // The averaged gradients' global L2 norm before clipping them to `max_norm` (0: no clipping), when
  // clipping or `want_norm`.
  virtual std::optional<double> clip(double max_norm, bool want_norm) = 0;
  // Sets the learning rate, and with `apply` takes the optimizer step.
  virtual void update(double lr, bool apply) = 0;

  // The trainable parameters' names in the optimizer's order, which its state follows.
  virtual const std::vector<std::string>& parameter_names() const = 0;
  // The name of the first parameter whose gradient holds inf or NaN, "" if none (for messages).
  virtual std::string first_nonfinite_gradient() const = 0;
  virtual torch::optim::Optimizer& optimizer() = 0;
  virtual double lr() const = 0;
  virtual std::size_t bucket_count() const = 0;
};

// The replicated update over `trainable` (name, parameter), in the module's order: GradSync with
// dist.bucket_mb, dist.overlap and dist.grad_compression, and the optimizer of `config.optim`.
std::unique_ptr<GradientUpdate> replicated_update(const config::Config& config, comm::Communicator& comm,
                                                  const NamedParameters& trainable);

}  // namespace hpctrain::train
