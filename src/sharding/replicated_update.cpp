// The replicated update (gradient_update.h): GradSync averages every gradient on every rank, and
// every rank applies the whole optimizer step to its own copy of the parameters.
#include <torch/torch.h>

#include <cmath>

#include "hpctrain/ddp/grad_sync.h"
#include "hpctrain/optim/nonfinite.h"
#include "hpctrain/optim/train_state.h"
#include "hpctrain/sharding/gradient_update.h"

namespace hpctrain::sharding {

ddp::GradSyncOptions gradient_sync_options(const config::DistConfig& dist) {
  ddp::GradSyncOptions options;
  options.bucket_bytes = static_cast<std::int64_t>(dist.bucket_mb * (1 << 20));
  options.overlap = dist.overlap;
  switch (dist.grad_compression) {
    case config::GradCompression::kFp16: options.wire_dtype = at::kHalf; break;
    case config::GradCompression::kBf16: options.wire_dtype = at::kBFloat16; break;
    case config::GradCompression::kNone: break;
  }
  return options;
}

namespace {

std::vector<at::Tensor> tensors_of(const optim::NamedParameters& named) {
  std::vector<at::Tensor> out;
  for (const auto& entry : named) out.push_back(entry.second);
  return out;
}

class ReplicatedUpdate final : public GradientUpdate, public UpdateState {
 public:
  ReplicatedUpdate(const config::Config& config, comm::Communicator& comm, const optim::NamedParameters& trainable)
      : parameters_(tensors_of(trainable)),
        sync_(std::make_unique<ddp::GradSync>(comm, parameters_, gradient_sync_options(config.dist))),
        optimizer_(optim::make_optimizer(config.optim, trainable)),
        names_(optim::names_in_optimizer_order(*optimizer_, trainable)),
        optim_(config.optim) {
    for (const auto& named : trainable) module_order_names_.push_back(named.first);
  }

  void zero_grad() override { optimizer_->zero_grad(); }
  void begin_backward(bool last_micro_batch) override { sync_->begin_backward(last_micro_batch); }
  void reduce_gradients() override { sync_->average_gradients(); }

  bool unscale_and_check(const optim::LossScaler* scaler) override {
    return scaler != nullptr ? scaler->unscale(gradients()) : optim::all_finite(gradients());
  }

  // optim.clip_grad_norm on the averaged gradients, equal on every rank, so every rank clips alike.
  std::optional<double> clip(double max_norm, bool want_norm) override {
    if (max_norm > 0) return torch::nn::utils::clip_grad_norm_(parameters_, max_norm);
    if (!want_norm) return std::nullopt;
    double squares = 0;
    for (const auto& p : parameters_) {
      if (p.grad().defined()) squares += p.grad().detach().pow(2).sum().item<double>();
    }
    return std::sqrt(squares);
  }

  void update(double lr, bool apply) override {
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
    if (apply) optimizer_->step();
  }

  UpdateState& state() override { return *this; }

  std::string first_nonfinite_gradient() override {
    const std::int64_t first = optim::first_nonfinite(gradients());
    return first >= 0 ? module_order_names_[static_cast<size_t>(first)] : "";
  }

  double lr() const override { return optim::current_lr(*optimizer_); }
  std::size_t bucket_count() const override { return sync_->bucket_count(); }

  void add_state(ckpt::Checkpoint& checkpoint) override {
    checkpoint.groups[ckpt::group::kOptim] = optim::optimizer_state(*optimizer_, names_);
  }
  void load_optimizer_state(const ckpt::CheckpointReader& reader) override {
    optim::load_optimizer_state(*optimizer_, names_, reader.read_group(ckpt::group::kOptim));
  }

  ckpt::TensorSlices owned_weights() const override {
    ckpt::TensorSlices weights;
    for (size_t i = 0; i < parameters_.size(); ++i) {
      weights.push_back({module_order_names_[i], parameters_[i].sizes().vec(), 0, parameters_[i]});
    }
    return weights;
  }

  // Every rank holds all of it.
  observe::HeldBytes held_bytes() const override {
    observe::HeldBytes held;
    std::int64_t elements = 0;
    for (const auto& p : parameters_) {
      elements += p.numel();
      held.parameters += static_cast<std::int64_t>(p.nbytes());
    }
    held.gradients = held.parameters;
    held.optimizer_state = elements * optim::optimizer_state_bytes_per_element(optim_);
    return held;
  }

 private:
  std::vector<at::Tensor> gradients() const {
    std::vector<at::Tensor> out;
    for (const auto& p : parameters_) out.push_back(p.grad());
    return out;
  }

  std::vector<at::Tensor> parameters_;  // in the module's order
  std::unique_ptr<ddp::GradSync> sync_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<std::string> names_;               // in the optimizer's order
  std::vector<std::string> module_order_names_;  // of parameters_
  config::OptimConfig optim_;
};

}  // namespace

std::unique_ptr<GradientUpdate> replicated_update(const config::Config& config, comm::Communicator& comm,
                                                  const optim::NamedParameters& trainable) {
  return std::make_unique<ReplicatedUpdate>(config, comm, trainable);
}

}  // namespace hpctrain::sharding
