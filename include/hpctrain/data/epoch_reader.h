// The training input of one epoch, an optimizer step at a time: the sampler's plan from the
// cursor, read ahead by a Loader (Source::read on its threads), every micro-batch of a step
// finished on the compute device (Source::finish). The training loop asks for a step and gets its
// micro-batches ready for the model. Depends on data (Source, Sampler, Loader), core and ATen.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "hpctrain/data/loader.h"
#include "hpctrain/data/sampler.h"
#include "hpctrain/data/source.h"

namespace hpctrain::data {

// One optimizer step's input.
struct StepInput {
  std::vector<Batch> micro_batches;  // finished: on the device, as the model takes them
  std::int64_t next_cursor = 0;      // the epoch's cursor once this step is taken
  double wait_s = 0.0;               // waiting for the loader's batches
};

class EpochReader {
 public:
  // The rest of `epoch` from `cursor`, `accumulation` micro-batches per optimizer step (the
  // epoch's last step may have fewer).
  EpochReader(std::shared_ptr<const Source> source, const Sampler& sampler, std::int64_t epoch,
              std::int64_t cursor, std::int64_t accumulation, LoaderOptions options, c10::Device device);

  // Optimizer steps in the rest of the epoch, and how many next() has returned.
  std::int64_t steps() const { return steps_; }
  std::int64_t taken() const { return taken_; }
  bool done() const { return taken_ == steps_; }

  // The next step's micro-batches. Rethrows a loader thread's read error.
  StepInput next();

 private:
  std::shared_ptr<const Source> source_;
  std::shared_ptr<const std::vector<SamplerStep>> plan_;  // the epoch's micro-batches from the cursor
  std::int64_t accumulation_;
  std::int64_t steps_;
  std::int64_t taken_ = 0;
  c10::Device device_;
  Loader loader_;  // last: its threads start once everything above is in place
};

}  // namespace hpctrain::data
