// Text generation with a language model (gpt, or a scripted one): one token at a time, greedy or
// sampled (temperature, top-k, top-p), with gpt's KV cache where it can be used. A context longer
// than the model's block size keeps its last block-size tokens. Depends on model and ATen.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "hpctrain/model/model.h"

namespace hpctrain::model {

struct SamplingOptions {
  std::int64_t max_new_tokens = 64;
  double temperature = 1.0;  // 0: greedy (the most likely token; no randomness)
  std::int64_t top_k = 0;    // 0: all tokens
  double top_p = 1.0;        // nucleus: the fewest most likely tokens whose probabilities reach it
  std::uint64_t seed = 0;
  bool kv_cache = true;      // gpt's; other models recompute the context each token
};

// The tokens that continue each of `prompts` (non-empty, all of one length), computed as one
// batch. Prompt i's draws come from a generator seeded by (options.seed, streams[i]), so its
// continuation does not depend on the rank, or the batch, that makes it (up to the last bits of
// the logits, which a batch of another size may round differently). `context`: the model's block
// size. The model must be in eval mode on `device`.
std::vector<std::vector<std::int32_t>> generate(Model& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                                const SamplingOptions& options,
                                                const std::vector<std::uint64_t>& streams, std::int64_t context,
                                                c10::Device device);

// One prompt: a batch of one.
std::vector<std::int32_t> generate(Model& model, const std::vector<std::int32_t>& prompt,
                                   const SamplingOptions& options, std::uint64_t stream, std::int64_t context,
                                   c10::Device device);

}  // namespace hpctrain::model
