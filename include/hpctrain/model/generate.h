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
  bool kv_cache = true;      // gpt's and llama's; other models recompute the context each token
  std::vector<std::int64_t> stop_ids;  // a continuation ends at any of them (the model's EOS ids)
};

struct Continuation {
  std::vector<std::int32_t> tokens;  // the new tokens, a stop id left out
  bool stopped = false;              // ended at a stop id, not at max_new_tokens
};

// The tokens that continue each of `prompts` (non-empty), computed as one batch. Prompts of
// different lengths need a MaskedLanguageModel (llama), which sees them padded on the left with
// each row's positions its own, and a context that holds the longest plus max_new_tokens; other
// models take prompts of one length. Prompt i's draws come from a generator seeded by
// (options.seed, streams[i]), so its continuation does not depend on the rank, or the batch,
// that makes it (up to the last bits of the logits, which a batch of another size may round
// differently). `context`: the model's block size. The model must be in eval mode on `device`.
std::vector<Continuation> generate(Model& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                   const SamplingOptions& options, const std::vector<std::uint64_t>& streams,
                                   std::int64_t context, c10::Device device);

// Whether generate() can batch prompts of different lengths with `model`, up to `longest` tokens.
bool batches_any_lengths(Model& model, const SamplingOptions& options, std::int64_t longest, std::int64_t context);

}  // namespace hpctrain::model
