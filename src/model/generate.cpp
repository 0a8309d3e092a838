#include "hpctrain/model/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>

#include "hpctrain/core/counter_rng.h"
#include "hpctrain/core/error.h"
#include "hpctrain/model/language_model.h"

namespace hpctrain::model {
namespace {

// The next token from the last position's logits [vocab].
std::int32_t choose(at::Tensor logits, const SamplingOptions& options, at::Generator& generator) {
  logits = logits.to(at::kCPU, at::kFloat);
  if (options.temperature <= 0) return static_cast<std::int32_t>(logits.argmax().item<std::int64_t>());
  logits = logits / options.temperature;
  if (options.top_k > 0 && options.top_k < logits.size(0)) {
    const at::Tensor kth = std::get<0>(logits.topk(options.top_k)).min();
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  at::Tensor probs = torch::softmax(logits, 0);
  if (options.top_p < 1.0) {
    const auto [sorted, order] = probs.sort(/*dim=*/0, /*descending=*/true);
    // Keep a token while the probability before it is below top_p: the most likely always stays.
    const at::Tensor before = sorted.cumsum(0) - sorted;
    const at::Tensor dropped = order.masked_select(before >= options.top_p);
    probs.index_fill_(0, dropped, 0.0);
  }
  return static_cast<std::int32_t>(at::multinomial(probs, 1, /*replacement=*/false, generator).item<std::int64_t>());
}

// Columns [from, end) of every row of `tokens` as a [B, T] batch.
at::Tensor as_batch(const std::vector<std::vector<std::int32_t>>& tokens, std::size_t from, c10::Device device) {
  std::vector<std::int64_t> ids;
  for (const auto& row : tokens) ids.insert(ids.end(), row.begin() + static_cast<std::ptrdiff_t>(from), row.end());
  return torch::tensor(ids, torch::kLong).view({static_cast<std::int64_t>(tokens.size()), -1}).to(device);
}

// The last position's logits [B, vocab] of rows of one length: the new columns through the cache
// while the context holds them, else the last `context` tokens recomputed.
at::Tensor next_logits_same_length(Model& model, CachedLanguageModel* cached, KvCache& cache,
                                   const std::vector<std::vector<std::int32_t>>& tokens, std::int64_t context,
                                   c10::Device device) {
  const auto total = static_cast<std::int64_t>(tokens[0].size());
  if (cached != nullptr && total <= context) {
    const at::Tensor fresh = as_batch(tokens, static_cast<std::size_t>(cache.length), device);
    return cached->forward_cached(fresh, cache).select(1, -1);
  }
  const auto from = static_cast<std::size_t>(std::max<std::int64_t>(0, total - context));
  return model.forward(as_batch(tokens, from, device)).select(1, -1);
}

// Rows of different lengths, padded on the left to one: row b starts after pads[b] pad columns,
// which no token attends to, and its positions count from 0 at its first real token.
at::Tensor next_logits_padded(MaskedLanguageModel& model, KvCache* cache,
                              const std::vector<std::vector<std::int32_t>>& tokens,
                              const std::vector<std::int64_t>& pads, c10::Device device) {
  const auto rows = static_cast<std::int64_t>(tokens.size());
  const std::int64_t width = pads[0] + static_cast<std::int64_t>(tokens[0].size());
  const std::int64_t from = cache != nullptr ? cache->length : 0;
  std::vector<std::int64_t> ids;
  std::vector<std::int64_t> positions;
  for (std::int64_t b = 0; b < rows; ++b) {
    for (std::int64_t j = from; j < width; ++j) {
      const std::int64_t k = j - pads[static_cast<size_t>(b)];
      ids.push_back(k < 0 ? 0 : tokens[static_cast<size_t>(b)][static_cast<size_t>(k)]);
      positions.push_back(std::max<std::int64_t>(k, 0));
    }
  }
  const at::Tensor pad_counts = torch::tensor(pads, torch::kLong).unsqueeze(1);
  const at::Tensor real = torch::arange(width, torch::kLong).unsqueeze(0).ge(pad_counts);
  const TokenMask mask{real, torch::tensor(positions, torch::kLong).view({rows, width - from})};
  return model.forward_masked(torch::tensor(ids, torch::kLong).view({rows, width - from}).to(device), mask, cache)
      .select(1, -1);
}

bool one_length(const std::vector<std::vector<std::int32_t>>& prompts) {
  return std::all_of(prompts.begin(), prompts.end(), [&](const auto& p) { return p.size() == prompts[0].size(); });
}

}  // namespace

bool batches_any_lengths(Model& model, const SamplingOptions& options, std::int64_t longest, std::int64_t context) {
  return dynamic_cast<MaskedLanguageModel*>(&model) != nullptr && longest + options.max_new_tokens <= context;
}

std::vector<Continuation> generate(Model& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                   const SamplingOptions& options, const std::vector<std::uint64_t>& streams,
                                   std::int64_t context, c10::Device device) {
  HT_CHECK(!prompts.empty() && prompts.size() == streams.size(), "generate needs a stream for every prompt");
  std::size_t longest = 0;
  for (const auto& prompt : prompts) {
    HT_CHECK(!prompt.empty(), "generate continues non-empty prompts");
    longest = std::max(longest, prompt.size());
  }
  // Rows of different lengths go through the mask (left padding), rows of one length as they are.
  auto* padded = one_length(prompts) ? nullptr : dynamic_cast<MaskedLanguageModel*>(&model);
  HT_CHECK(one_length(prompts) || batches_any_lengths(model, options, static_cast<std::int64_t>(longest), context),
           "generate batches prompts of different lengths only for a masked model whose context holds them");
  const torch::NoGradGuard no_grad;
  std::vector<at::Generator> generators;
  for (const std::uint64_t stream : streams) {
    generators.push_back(at::detail::createCPUGenerator(splitmix64(options.seed ^ splitmix64(stream))));
  }
  auto* cached = options.kv_cache ? dynamic_cast<CachedLanguageModel*>(&model) : nullptr;
  std::vector<std::int64_t> pads;
  for (const auto& prompt : prompts) pads.push_back(static_cast<std::int64_t>(longest - prompt.size()));
  KvCache cache;
  std::vector<std::vector<std::int32_t>> tokens = prompts;
  std::vector<Continuation> out(prompts.size());
  std::size_t running = prompts.size();
  for (std::int64_t n = 0; n < options.max_new_tokens && running > 0; ++n) {
    const at::Tensor last =
        padded != nullptr ? next_logits_padded(*padded, options.kv_cache ? &cache : nullptr, tokens, pads, device)
                          : next_logits_same_length(model, cached, cache, tokens, context, device);
    for (size_t b = 0; b < tokens.size(); ++b) {
      const std::int32_t next = choose(last[static_cast<std::int64_t>(b)], options, generators[b]);
      tokens[b].push_back(next);  // a finished row's too, to keep the batch rectangular
      if (out[b].stopped) continue;
      if (std::find(options.stop_ids.begin(), options.stop_ids.end(), next) != options.stop_ids.end()) {
        out[b].stopped = true;
        --running;
      } else {
        out[b].tokens.push_back(next);
      }
    }
  }
  return out;
}

}  // namespace hpctrain::model
