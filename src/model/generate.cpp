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

at::Tensor as_batch(const std::vector<std::int32_t>& tokens, std::size_t from, c10::Device device) {
  std::vector<std::int64_t> ids(tokens.begin() + static_cast<std::ptrdiff_t>(from), tokens.end());
  return torch::tensor(ids, torch::kLong).view({1, -1}).to(device);
}

}  // namespace

std::vector<std::int32_t> generate(Model& model, const std::vector<std::int32_t>& prompt,
                                   const SamplingOptions& options, std::uint64_t stream, std::int64_t context,
                                   c10::Device device) {
  HT_CHECK(!prompt.empty(), "generate needs a prompt of at least one token");
  const torch::NoGradGuard no_grad;
  at::Generator generator = at::detail::createCPUGenerator(splitmix64(options.seed ^ splitmix64(stream)));
  auto* cached = options.kv_cache ? dynamic_cast<CachedLanguageModel*>(&model) : nullptr;
  KvCache cache;
  std::vector<std::int32_t> tokens = prompt;
  std::vector<std::int32_t> out;
  for (std::int64_t n = 0; n < options.max_new_tokens; ++n) {
    const auto total = static_cast<std::int64_t>(tokens.size());
    at::Tensor logits;
    if (cached != nullptr && total <= context) {
      // The prompt (or what is not cached yet) in one forward, then one token at a time.
      logits = cached->forward_cached(as_batch(tokens, static_cast<std::size_t>(cache.length), device), cache);
    } else {
      logits = model.forward(as_batch(tokens, static_cast<std::size_t>(std::max<std::int64_t>(0, total - context)), device));
    }
    const std::int32_t next = choose(logits[0][-1], options, generator);
    out.push_back(next);
    tokens.push_back(next);
  }
  return out;
}

}  // namespace hpctrain::model
