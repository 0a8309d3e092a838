#include "hpctrain/train/evaluator.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/log.h"
#include "hpctrain/ddp/grad_sync.h"
#include "hpctrain/model/model.h"

namespace hpctrain::train {

namespace {

// The sums of (loss, correct predictions) over `batch`.
std::pair<at::Tensor, at::Tensor> score(model::Model& model, const Objective& objective, const data::Batch& batch) {
  if (!objective.has_accuracy()) {
    const at::Tensor losses = objective.per_sample_loss(objective.predict(model, batch));
    return {losses.sum(), at::zeros({}, losses.options().dtype(at::kLong))};
  }
  at::Tensor logits = model.forward(batch.input);
  at::Tensor target = batch.target;
  if (logits.dim() == 3) {  // a language model's [B, T, vocab]: every token is scored
    logits = logits.flatten(0, 1);
    target = target.flatten();
  }
  const at::Tensor loss = torch::nn::functional::cross_entropy(
      logits, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  return {loss, logits.argmax(1).eq(target).sum()};
}

}  // namespace

EvalResult evaluate(model::Model& model, const Objective& objective, const data::Source& source,
                    comm::Communicator& comm, std::int64_t batch_size, c10::Device device) {
  model.module().eval();
  torch::NoGradGuard no_grad;
  const std::int64_t items = source.items();
  const std::int64_t first = items * comm.rank() / comm.size();
  const std::int64_t last = items * (comm.rank() + 1) / comm.size();
  // Sums stay on the device until the end: no host synchronization per batch.
  at::Tensor loss_sum = torch::zeros({}, torch::dtype(torch::kFloat64).device(device));
  at::Tensor correct = torch::zeros({}, torch::dtype(torch::kInt64).device(device));
  for (std::int64_t start = first; start < last; start += batch_size) {
    const data::Batch batch = source.finish(source.read_items(start, std::min(batch_size, last - start)), device);
    const auto [loss, right] = score(model, objective, batch);
    loss_sum += loss;
    correct += right;
  }
  const std::vector<double> totals = ddp::sum_over_ranks(
      comm, {loss_sum.item<double>(), correct.item<double>(), static_cast<double>(last - first)}, device);
  const double scored = totals[2] * static_cast<double>(std::max<std::int64_t>(1, source.tokens_per_item()));
  return {totals[0] / scored, totals[1] / scored, objective.has_accuracy(), static_cast<std::int64_t>(totals[2]),
          static_cast<std::int64_t>(totals[2]) * source.tokens_per_item()};
}

double EvalResult::perplexity() const { return std::exp(loss); }

Evaluation::Evaluation(std::shared_ptr<const data::Source> source, const config::Config& config,
                       comm::Communicator& comm, c10::Device device, observe::MetricsWriter& metrics)
    : source_(std::move(source)),
      config_(config),
      objective_(make_objective(config)),
      comm_(comm),
      device_(device),
      metrics_(metrics) {}

EvalResult Evaluation::run(model::Model& model, std::int64_t epoch, std::int64_t step) {
  const EvalResult result = evaluate(model, *objective_, *source_, comm_, config_.train.eval_batch_size, device_);
  nlohmann::json record = {{"epoch", epoch + 1}, {"step", step}, {"test_loss", result.loss}};
  if (result.has_accuracy) record["test_acc"] = result.accuracy;
  if (!result.has_accuracy) {
    log::info("epoch {} step {} eval on {} ({} samples): test_loss {:.4f} (diffusion)", epoch + 1, step,
              config_.data.eval_split, result.samples, result.loss);
  } else if (result.language_model()) {
    log::info("epoch {} step {} eval on {} ({} tokens): test_loss {:.4f} test_ppl {:.2f} test_acc {:.4f} (next token)",
              epoch + 1, step, config_.data.eval_split, result.tokens, result.loss, result.perplexity(),
              result.accuracy);
    record["test_ppl"] = result.perplexity();
  } else {
    log::info("epoch {} step {} eval on {} ({} samples): test_loss {:.4f} test_acc {:.4f}", epoch + 1, step,
              config_.data.eval_split, result.samples, result.loss, result.accuracy);
  }
  metrics_.write(record);
  if (result.language_model() || !result.has_accuracy) {
    improved_ = !best_.test_loss || std::isnan(*best_.test_loss) || result.loss < *best_.test_loss;
    if (improved_) best_.test_loss = result.loss;
  } else {
    improved_ = !best_.test_acc || result.accuracy > *best_.test_acc;
    if (improved_) best_.test_acc = result.accuracy;
  }
  return result;
}

}  // namespace hpctrain::train
