// Distributed evaluation: each rank scores a disjoint contiguous part of the split (no padding, so
// every sample counts once) and one allreduce of (loss sum, correct, count) gives the global result.
// Depends on comm, data, model.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace hpctrain::comm {
class Communicator;
}
namespace hpctrain::data {
class Split;
}
namespace hpctrain::model {
class Model;
}

namespace hpctrain::train {

struct EvalResult {
  double loss = 0.0;      // mean cross-entropy
  double accuracy = 0.0;  // fraction of correct top-1 predictions
  std::int64_t samples = 0;
};

// Collective. The model lives on `device`; batches are copied there. Leaves it in eval mode.
EvalResult evaluate(model::Model& model, const data::Split& split, comm::Communicator& comm,
                    std::int64_t batch_size, c10::Device device);

}  // namespace hpctrain::train
