#include "hpctrain/train/evaluator.h"

#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <numeric>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"
#include "hpctrain/data/split.h"
#include "hpctrain/data/token_stream.h"
#include "hpctrain/ddp/grad_sync.h"
#include "hpctrain/model/model.h"

namespace hpctrain::train {

namespace {

// Logits [N, C] and their targets [N], on the device, for items [start, start + count).
using ScoredBatch = std::function<std::pair<at::Tensor, at::Tensor>(std::int64_t start, std::int64_t count)>;

// Collective: this rank scores its contiguous part of `items`, `batch_size` at a time, and the
// sums of all ranks are returned: summed cross-entropy, correct top-1 predictions, items scored.
std::vector<double> score_over_ranks(model::Model& model, comm::Communicator& comm, c10::Device device,
                                     std::int64_t items, std::int64_t batch_size, const ScoredBatch& batch) {
  model.module().eval();
  torch::NoGradGuard no_grad;
  const std::int64_t first = items * comm.rank() / comm.size();
  const std::int64_t last = items * (comm.rank() + 1) / comm.size();
  // Sums stay on the device until the end: no host synchronization per batch.
  at::Tensor loss_sum = torch::zeros({}, torch::dtype(torch::kFloat64).device(device));
  at::Tensor correct = torch::zeros({}, torch::dtype(torch::kInt64).device(device));
  for (std::int64_t start = first; start < last; start += batch_size) {
    const auto [logits, target] = batch(start, std::min(batch_size, last - start));
    loss_sum += torch::nn::functional::cross_entropy(
        logits, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    correct += logits.argmax(1).eq(target).sum();
  }
  return ddp::sum_over_ranks(comm, {loss_sum.item<double>(), correct.item<double>(), static_cast<double>(last - first)},
                             device);
}

}  // namespace

EvalResult evaluate(model::Model& model, const data::Split& split, comm::Communicator& comm,
                    std::int64_t batch_size, c10::Device device) {
  const std::vector<double> totals =
      score_over_ranks(model, comm, device, split.size(), batch_size, [&](std::int64_t start, std::int64_t count) {
        const data::Batch batch = split.range(start, count);
        return std::make_pair(model.forward(split.normalize(batch.input.to(device))), batch.target.to(device));
      });
  return {totals[0] / totals[2], totals[1] / totals[2], static_cast<std::int64_t>(totals[2]), 0};
}

EvalResult evaluate(model::Model& model, const data::TokenStream& stream, comm::Communicator& comm,
                    std::int64_t batch_size, c10::Device device) {
  const std::int64_t block = stream.block_size();
  const std::int64_t windows = (stream.size() - 1) / block;
  HT_CHECK(windows > 0, "the evaluation stream is shorter than one window");
  const std::vector<double> totals =
      score_over_ranks(model, comm, device, windows, batch_size, [&](std::int64_t start, std::int64_t count) {
        std::vector<std::int64_t> offsets(static_cast<size_t>(count));
        std::iota(offsets.begin(), offsets.end(), start);
        for (auto& offset : offsets) offset *= block;
        const data::Batch batch = stream.gather(offsets);
        return std::make_pair(model.forward(batch.input.to(device)).flatten(0, 1), batch.target.to(device).flatten());
      });
  const double tokens = totals[2] * static_cast<double>(block);
  return {totals[0] / tokens, totals[1] / tokens, static_cast<std::int64_t>(totals[2]),
          static_cast<std::int64_t>(tokens)};
}

double EvalResult::perplexity() const { return std::exp(loss); }

}  // namespace hpctrain::train
