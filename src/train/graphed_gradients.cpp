// Note [CUDA graphs]: a GPT-2-small micro-batch launches about a thousand kernels in its forward
// and backward, many of them short; between them the GPU waits for the host. A CUDA graph
// records the launches once and replays them as one. What a replay reads and writes must stay at
// the addresses of the capture, so the graph reads a batch of its own (each micro-batch is
// copied into it), writes its loss into a tensor of its own, and accumulates into the gradients
// in place (Step zeroes them in place instead of dropping them). The update stays outside: with
// optim.fused it is a few launches, and the learning rate, the finiteness check, clipping and
// the step count stay the host's, as in an eager step. Capture happens at the second step, after
// the first has counted the FLOPs and made the libraries' handles; it follows one real run of
// the micro-batch, which is that micro-batch's work (the capture itself computes nothing).
#include "graphed_gradients.h"

#include <torch/torch.h>

#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"

namespace hpctrain::train {

bool GraphedGradients::fits(const data::Batch& batch, std::int64_t step_real) const {
  const auto same = [](const at::Tensor& a, const at::Tensor& b) {
    return a.defined() == b.defined() &&
           (!a.defined() || (a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && a.device() == b.device()));
  };
  return step_real == step_real_ && same(batch.input, static_batch_.input) &&
         same(batch.target, static_batch_.target) && same(batch.weight, static_batch_.weight);
}

void GraphedGradients::capture(const data::Batch& batch, std::int64_t step_real, const Compute& compute) {
  static_batch_ = batch;
  static_batch_.input = batch.input.clone();
  static_batch_.target = batch.target.clone();
  if (batch.weight.defined()) static_batch_.weight = batch.weight.clone();
  step_real_ = step_real;
  loss_sum_ = torch::zeros({}, torch::dtype(torch::kFloat64).device(device_));
  try {
    graph_ = std::make_unique<CapturedWork>(
        device_, [&] { loss_sum_.copy_(compute(static_batch_, step_real_)); }, /*warmup=*/1);
  } catch (const c10::Error& e) {
    throw ConfigError(std::string("train.cuda_graphs=true: the forward and backward could not be captured (") +
                      e.what_without_backtrace() + "); set train.cuda_graphs=false");
  }
  log::info("train.cuda_graphs: captured a micro-batch's forward and backward ({} samples of shape {}); "
            "replayed from now on",
            batch.input.size(0), c10::str(batch.input.sizes()));
}

at::Tensor GraphedGradients::run(const data::Batch& batch, std::int64_t step_real, bool full,
                                 const Compute& compute) {
  if (graph_ && fits(batch, step_real)) {
    ++replays_;
    static_batch_.input.copy_(batch.input, /*non_blocking=*/true);
    static_batch_.target.copy_(batch.target, /*non_blocking=*/true);
    if (batch.weight.defined()) static_batch_.weight.copy_(batch.weight, /*non_blocking=*/true);
    graph_->replay();
    return loss_sum_.clone();
  }
  if (!graph_ && full) {
    capture(batch, step_real, compute);
    return loss_sum_.clone();
  }
  if (graph_ && !told_eager_) {
    told_eager_ = true;
    log::info("train.cuda_graphs: a micro-batch of shape {} ({} real samples in the step) does not fit the "
              "graph; such micro-batches run eagerly",
              c10::str(batch.input.sizes()), step_real);
  }
  return compute(batch, step_real);
}

}  // namespace hpctrain::train
