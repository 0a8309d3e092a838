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

}  // namespace

std::vector<std::vector<std::int32_t>> generate(Model& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                                const SamplingOptions& options,
                                                const std::vector<std::uint64_t>& streams, std::int64_t context,
                                                c10::Device device) {
  HT_CHECK(!prompts.empty() && prompts.size() == streams.size(), "generate needs a stream for every prompt");
  for (const auto& prompt : prompts) {
    HT_CHECK(!prompt.empty() && prompt.size() == prompts[0].size(), "generate batches prompts of one length");
  }
  const torch::NoGradGuard no_grad;
  std::vector<at::Generator> generators;
  for (const std::uint64_t stream : streams) {
    generators.push_back(at::detail::createCPUGenerator(splitmix64(options.seed ^ splitmix64(stream))));
  }
  auto* cached = options.kv_cache ? dynamic_cast<CachedLanguageModel*>(&model) : nullptr;
  KvCache cache;
  std::vector<std::vector<std::int32_t>> tokens = prompts;
  std::vector<std::vector<std::int32_t>> out(prompts.size());
  for (std::int64_t n = 0; n < options.max_new_tokens; ++n) {
    const auto total = static_cast<std::int64_t>(tokens[0].size());
    at::Tensor logits;
    if (cached != nullptr && total <= context) {
      // The prompts (or what is not cached yet) in one forward, then one token at a time.
      logits = cached->forward_cached(as_batch(tokens, static_cast<std::size_t>(cache.length), device), cache);
    } else {
      const auto from = static_cast<std::size_t>(std::max<std::int64_t>(0, total - context));
      logits = model.forward(as_batch(tokens, from, device));
    }
    const at::Tensor last = logits.select(1, -1);
    for (size_t b = 0; b < tokens.size(); ++b) {
      const std::int32_t next = choose(last[static_cast<std::int64_t>(b)], options, generators[b]);
      out[b].push_back(next);
      tokens[b].push_back(next);
    }
  }
  return out;
}

std::vector<std::int32_t> generate(Model& model, const std::vector<std::int32_t>& prompt,
                                   const SamplingOptions& options, std::uint64_t stream, std::int64_t context,
                                   c10::Device device) {
  return generate(model, std::vector<std::vector<std::int32_t>>{prompt}, options, {stream}, context, device)[0];
}

}  // namespace hpctrain::model
