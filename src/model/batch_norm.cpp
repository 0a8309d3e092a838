#include "hpctrain/model/batch_norm.h"

#include <vector>

#include "batch_norm_layer.h"

namespace hpctrain::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Every dimension but the channels (1).
std::vector<std::int64_t> reduced_dims(const at::Tensor& x) {
  std::vector<std::int64_t> dims{0};
  for (std::int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel [C] tensor shaped to broadcast against x: [1, C, 1, ...].
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& x) {
  std::vector<std::int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = v.numel();
  return v.view(shape);
}

// y = (x - mean) * invstd * weight + bias with the global mean and invstd computed by the caller.
// Backward needs two more global sums per channel, of dy and of dy * x_hat (Note [SyncBN backward]).
struct SynchronizedNorm : torch::autograd::Function<SynchronizedNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& mean, const at::Tensor& invstd,
                            double count, BatchNormImpl* layer) {
    ctx->save_for_backward({x, weight, mean, invstd});
    ctx->saved_data["count"] = count;
    ctx->saved_data["layer"] = reinterpret_cast<std::int64_t>(layer);
    return (x - per_channel(mean, x)) * per_channel(invstd * weight, x) + per_channel(bias, x);
  }

  // Note [SyncBN backward]: with N the global count and sums over all ranks,
  //   dx = weight * invstd * (dy - sum(dy) / N - x_hat * sum(dy * x_hat) / N),
  // while dweight = sum(dy * x_hat) and dbias = sum(dy) stay this rank's own: GradSync averages
  // them like every other parameter gradient.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& mean = saved[2];
    const at::Tensor& invstd = saved[3];
    const double count = ctx->saved_data["count"].toDouble();
    auto* layer = reinterpret_cast<BatchNormImpl*>(ctx->saved_data["layer"].toInt());
    const at::Tensor dy = grad_outputs[0];
    const auto dims = reduced_dims(x);
    const at::Tensor x_hat = (x - per_channel(mean, x)) * per_channel(invstd, x);
    const at::Tensor sum_dy = dy.sum(dims);
    const at::Tensor sum_dy_x_hat = (dy * x_hat).sum(dims);
    at::Tensor global = at::cat({sum_dy, sum_dy_x_hat}).to(at::kDouble).contiguous();
    layer->reduce(global);
    global = global.to(x.scalar_type());
    const std::int64_t c = mean.numel();
    const at::Tensor dx = (dy - per_channel(global.narrow(0, 0, c) / count, x) -
                           x_hat * per_channel(global.narrow(0, c, c) / count, x)) *
                          per_channel(weight * invstd, x);
    return {dx, sum_dy_x_hat, sum_dy, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

BatchNormImpl::BatchNormImpl(std::int64_t channels_, double eps_, double momentum_)
    : channels(channels_), eps(eps_), momentum(momentum_) {
  reset();
}

// The names, order and initial values of torch::nn::BatchNorm2d's.
void BatchNormImpl::reset() {
  weight = register_parameter("weight", torch::ones({channels}));
  bias = register_parameter("bias", torch::zeros({channels}));
  running_mean = register_buffer("running_mean", torch::zeros({channels}));
  running_var = register_buffer("running_var", torch::ones({channels}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::tensor(0, torch::kLong));
}

at::Tensor BatchNormImpl::forward(const at::Tensor& input) {
  if (is_training()) {
    const torch::NoGradGuard no_grad;
    num_batches_tracked += 1;
  }
  if (is_training() && reduce) return synchronized_forward(input);
  return torch::batch_norm(input, weight, bias, running_mean, running_var, is_training(), momentum, eps,
                           at::globalContext().userEnabledCuDNN());
}

at::Tensor BatchNormImpl::synchronized_forward(const at::Tensor& input) {
  const auto dims = reduced_dims(input);
  at::Tensor mean;
  at::Tensor invstd;
  double count = 0;
  {
    const torch::NoGradGuard no_grad;
    // One reduction of [sum | sum of squares | count], in float64 against cancellation.
    const at::Tensor local_count = torch::full({1}, static_cast<double>(input.numel() / channels),
                                               input.options().dtype(at::kDouble));
    at::Tensor stats = at::cat({input.sum(dims, false, at::kDouble),
                                input.square().sum(dims, false, at::kDouble), local_count})
                           .contiguous();
    reduce(stats);
    count = stats[2 * channels].item<double>();
    const at::Tensor global_mean = stats.narrow(0, 0, channels) / count;
    const at::Tensor global_var = stats.narrow(0, channels, channels) / count - global_mean.square();
    mean = global_mean.to(input.scalar_type());
    invstd = (global_var + eps).rsqrt().to(input.scalar_type());
    // Running statistics as torch's BatchNorm keeps them: the variance unbiased.
    running_mean.mul_(1 - momentum).add_(mean, momentum);
    running_var.mul_(1 - momentum).add_(global_var.to(input.scalar_type()) * (count / (count - 1)), momentum);
  }
  return SynchronizedNorm::apply(input, weight, bias, mean, invstd, count, this);
}

int set_batch_stats_reducer(torch::nn::Module& module, const BatchStatsReducer& reduce) {
  int layers = 0;
  for (const auto& child : module.modules(/*include_self=*/true)) {
    if (auto* norm = dynamic_cast<BatchNormImpl*>(child.get())) {
      norm->reduce = reduce;
      ++layers;
    }
  }
  return layers;
}

}  // namespace hpctrain::model
