// Distributed evaluation: each rank scores a disjoint contiguous part of the split (no padding, so
// every sample counts once) and one allreduce of (loss sum, correct, count) gives the global result.
// A token stream is scored as windows laid end to end, each of their tokens predicted once (the
// stream's first token and a tail shorter than a window are not).
// Depends on comm, data, model.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace hpctrain::comm {
class Communicator;
}
namespace hpctrain::data {
class Split;
class TokenStream;
}
namespace hpctrain::model {
class Model;
}

namespace hpctrain::train {

struct EvalResult {
  double loss = 0.0;      // mean cross-entropy, per sample or (token stream) per token
  double accuracy = 0.0;  // fraction of correct top-1 predictions (of the next token)
  std::int64_t samples = 0;  // samples, or windows of a token stream
  std::int64_t tokens = 0;   // tokens predicted; 0 for a sample split
  bool language_model() const { return tokens > 0; }
  double perplexity() const;  // exp(loss), for a language model
};

// Collective. The model lives on `device`; batches are copied there. Leaves it in eval mode.
EvalResult evaluate(model::Model& model, const data::Split& split, comm::Communicator& comm,
                    std::int64_t batch_size, c10::Device device);
// The stream's (size - 1) / block_size windows end to end, `batch_size` windows at a time.
EvalResult evaluate(model::Model& model, const data::TokenStream& stream, comm::Communicator& comm,
                    std::int64_t batch_size, c10::Device device);

}  // namespace hpctrain::train
