// What a rank holds for training, as the progress records and the memory check report it.
#pragma once

#include <cstdint>

namespace hpctrain::observe {

// What a rank holds for training, in bytes, between steps.
struct HeldBytes {
  std::int64_t parameters = 0;       // the trainable parameters (stage 3: this rank's shards)
  std::int64_t gradients = 0;        // gradient buckets and shards
  std::int64_t optimizer_state = 0;  // the optimizer's moments or momentum, once it has stepped
};

}  // namespace hpctrain::observe
