#include "hpctrain/train/evaluator.h"

#include <torch/torch.h>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/data/split.h"
#include "hpctrain/model/model.h"

namespace hpctrain::train {

EvalResult evaluate(model::Model& model, const data::Split& split, comm::Communicator& comm,
                    std::int64_t batch_size) {
  model.module().eval();
  torch::NoGradGuard no_grad;
  const std::int64_t n = split.size();
  const std::int64_t first = n * comm.rank() / comm.size();
  const std::int64_t last = n * (comm.rank() + 1) / comm.size();
  double loss_sum = 0.0;
  double correct = 0.0;
  for (std::int64_t start = first; start < last; start += batch_size) {
    const data::Batch batch = split.range(start, std::min(batch_size, last - start));
    const at::Tensor logits = model.forward(batch.input);
    loss_sum += torch::nn::functional::cross_entropy(
                    logits, batch.target,
                    torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .item<double>();
    correct += logits.argmax(1).eq(batch.target).sum().item<double>();
  }
  at::Tensor totals = torch::tensor({loss_sum, correct, static_cast<double>(last - first)},
                                    torch::kFloat64);
  comm.allreduce(totals, comm::ReduceOp::kSum)->wait();
  const double count = totals[2].item<double>();
  return {totals[0].item<double>() / count, totals[1].item<double>() / count,
          static_cast<std::int64_t>(count)};
}

}  // namespace hpctrain::train
