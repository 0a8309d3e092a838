// The sharded update (gradient_update.h; docs/distributed.md, "Sharding (ZeRO)"): GradSync
// reduce-scatters the buckets, so each rank holds the average of its chunk of every bucket; the
// optimizer works on this rank's pieces of the parameters only (flat tensors over the parameters'
// own memory, their gradients over the shards), and the updated chunks are all-gathered back into
// every rank's parameters. Stage 1 keeps the full gradients in their buckets between steps, stage
// 2 frees each bucket once reduced. Stage 3 keeps only this rank's chunk of the parameters too
// (block_gatherer.h): one bucket per block of the model, the pieces over the chunks, and no
// all-gather after the step, since each forward gathers the blocks it runs.
#include <torch/torch.h>

#include <cmath>
#include <deque>
#include <map>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"
#include "hpctrain/ddp/buffer_pool.h"
#include "hpctrain/ddp/grad_sync.h"
#include "hpctrain/ddp/mapped_memory.h"
#include "hpctrain/ddp/shard_plan.h"
#include "hpctrain/sharding/gradient_update.h"
#include "block_gatherer.h"
#include "hpctrain/optim/nonfinite.h"
#include "hpctrain/optim/train_state.h"

namespace hpctrain::sharding {
namespace {

// Elements [offset, offset + numel) of `source`'s memory as a tensor of its own, which is no
// autograd view of `source` (Note [Gradients in buckets] in ddp/grad_sync.cpp).
at::Tensor alias(const at::Tensor& source, std::int64_t offset, std::int64_t numel) {
  const at::Tensor flat = source.detach().view({-1}).narrow(0, offset, numel);
  return at::empty({0}, flat.options()).set_(flat.storage(), flat.storage_offset(), flat.sizes(), flat.strides());
}

// Every state an optimizer of hpctrain's may keep per parameter (train_state.h names them).
constexpr const char* kStateNames[] = {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"};

class ShardedUpdate final : public GradientUpdate, public UpdateState {
 public:
  ShardedUpdate(const config::Config& config, comm::Communicator& comm, const optim::NamedParameters& trainable,
                model::Model& model)
      : stage_(static_cast<int>(config.dist.zero_stage)), optim_(config.optim), comm_(comm), model_(model) {
    std::vector<std::int64_t> numels;
    for (const auto& [name, parameter] : trainable) {
      HT_CHECK(parameter.is_contiguous() && parameter.scalar_type() == at::kFloat,
               name + ": Strategy::model_refusal refuses what cannot be sharded");
      names_.push_back(name);
      parameters_.push_back(parameter);
      numels.push_back(parameter.numel());
    }
    ddp::GradSyncOptions options = gradient_sync_options(config.dist);
    options.reduction = stage_ == 1 ? ddp::Reduction::kReduceScatter : ddp::Reduction::kReduceScatterAndRelease;
    options.pool = &pool_;
    if (stage_ == 3) shard_parameters(options);
    sync_ = std::make_unique<ddp::GradSync>(comm, parameters_, options);
    pieces_ = ddp::plan_shard(sync_->buckets(), numels, comm.size(), comm.rank());
    optim::NamedParameters named_pieces;
    std::vector<bool> decayed;
    for (const ddp::ShardPiece& piece : pieces_) {
      at::Tensor tensor = gatherer_ ? alias(gatherer_->shard(piece.bucket), piece.shard_offset, piece.numel)
                                    : alias(parameters_[piece.parameter], piece.parameter_offset, piece.numel);
      tensor.mutable_grad() = alias(sync_->shard(piece.bucket), piece.shard_offset, piece.numel);
      named_pieces.emplace_back(names_[piece.parameter], tensor);
      decayed.push_back(optim::decays(config.optim, parameters_[piece.parameter].dim()));
      piece_of_[names_[piece.parameter]] = piece_tensors_.size();
      piece_tensors_.push_back(tensor);
    }
    optimizer_ = optim::make_optimizer(config.optim, named_pieces, decayed);
    // Mapped: the state lives outside the heap that a step's temporaries come and go in.
    optim::allocate_optimizer_state(*optimizer_, ddp::mapped_zeros);
    piece_names_ = optim::names_in_optimizer_order(*optimizer_, named_pieces);
    if (gatherer_) model_.set_block_hooks(gatherer_.get());
  }

  ~ShardedUpdate() override {
    if (gatherer_) model_.set_block_hooks(nullptr);
  }

  // Stage 1's gradients stay in their bucket slots, zeroed; stage 2 holds none between steps (a
  // bucket is allocated when its first gradient arrives).
  void zero_grad() override {
    c10::NoGradGuard no_grad;
    for (auto& p : parameters_) {
      if (!p.grad().defined()) continue;
      if (stage_ == 1) {
        p.mutable_grad().zero_();
      } else {
        p.mutable_grad().reset();
      }
    }
  }
  void begin_backward(bool last_micro_batch) override { sync_->begin_backward(last_micro_batch); }
  void reduce_gradients() override {
    sync_->average_gradients();
    if (gatherer_) gatherer_->release_all();  // those whose gradients did not all come
  }

  // Each rank sees its shards only, so the ranks agree: a step is finite when every shard is.
  bool unscale_and_check(const optim::LossScaler* scaler) override {
    const std::vector<at::Tensor> shards = this->shards();
    const bool finite = scaler != nullptr ? scaler->unscale(shards) : optim::all_finite(shards);
    return ddp::sum_over_ranks(comm_, {finite ? 0.0 : 1.0}, device())[0] == 0.0;
  }

  // The global norm from every rank's sum of squares (the padding is zero), then the clipping
  // coefficient of torch.nn.utils.clip_grad_norm_.
  std::optional<double> clip(double max_norm, bool want_norm) override {
    if (max_norm <= 0 && !want_norm) return std::nullopt;
    c10::NoGradGuard no_grad;
    at::Tensor squares = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device()));
    for (const at::Tensor& shard : shards()) squares += shard.square().sum(at::kDouble);
    const double norm = std::sqrt(ddp::sum_over_ranks(comm_, {squares.item<double>()}, device())[0]);
    const double coefficient = max_norm / (norm + 1e-6);
    if (max_norm > 0 && coefficient < 1) {
      for (const at::Tensor& shard : shards()) shard.mul_(coefficient);
    }
    return norm;
  }

  void update(double lr, bool apply) override {
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
    if (!apply) return;
    optimizer_->step();
    if (gatherer_) {
      // Started while the ranks are together after the step, not where the forward would meet.
      gatherer_->prefetch_next_forward();
    } else {
      gather_parameters();
    }
  }

  UpdateState& state() override { return *this; }

  std::string first_nonfinite_gradient() override {
    std::vector<double> nonfinite(parameters_.size(), 0.0);
    for (size_t k = 0; k < pieces_.size(); ++k) {
      if (!optim::all_finite({piece_tensors_[k].grad()})) nonfinite[pieces_[k].parameter] = 1.0;
    }
    nonfinite = ddp::sum_over_ranks(comm_, nonfinite, device());
    for (size_t i = 0; i < nonfinite.size(); ++i) {
      if (nonfinite[i] > 0) return names_[i];
    }
    return "";
  }

  double lr() const override { return optim::current_lr(*optimizer_); }
  std::size_t bucket_count() const override { return sync_->bucket_count(); }

  // Every state tensor of a piece is a slice of the parameter-shaped dataset a replicated run
  // writes; the step count, one per parameter, comes from the rank owning its first element.
  void add_state(ckpt::Checkpoint& checkpoint) override {
    if (gatherer_) checkpoint.slices[ckpt::group::kModel] = with_tied_names(owned_weights());
    ckpt::TensorSlices& slices = checkpoint.slices[ckpt::group::kOptim];
    for (auto& [key, tensor] : optim::optimizer_state(*optimizer_, piece_names_)) {
      const std::string parameter = key.substr(0, key.rfind('/'));
      const ddp::ShardPiece& piece = pieces_[piece_of_.at(parameter)];
      if (tensor.dim() == 0) {
        if (piece.parameter_offset == 0) slices.push_back({key, {}, 0, tensor});
        continue;
      }
      const auto sizes = parameters_[piece.parameter].sizes();
      slices.push_back({key, {sizes.begin(), sizes.end()}, piece.parameter_offset, tensor});
    }
  }

  // Reads this rank's slice of each stored state, whatever world size and stage wrote it.
  void load_optimizer_state(const ckpt::CheckpointReader& reader) override {
    ckpt::NamedTensors stored;
    for (size_t k = 0; k < pieces_.size(); ++k) {
      const ddp::ShardPiece& piece = pieces_[k];
      const std::string& name = names_[piece.parameter];
      for (const char* state : kStateNames) {
        const std::string key = name + "/" + state;
        if (!reader.has(ckpt::group::kOptim, key)) continue;
        const std::vector<std::int64_t> shape = reader.stored_shape(ckpt::group::kOptim, key);
        const bool scalar = shape.empty();
        if (!scalar && shape != parameters_[piece.parameter].sizes().vec()) {
          throw CheckpointError("optimizer state " + key + " is of shape " + c10::str(at::IntArrayRef(shape)) +
                                ", the parameter of " + c10::str(parameters_[piece.parameter].sizes()));
        }
        at::Tensor host = scalar ? at::empty({}, at::kLong) : at::empty({piece.numel}, at::kFloat);
        reader.read_slice(ckpt::group::kOptim, key, scalar ? 0 : piece.parameter_offset, host);
        stored.emplace_back(key, host);
      }
    }
    optim::load_optimizer_state(*optimizer_, piece_names_, stored);
  }

  void with_whole_parameters(const std::function<void()>& use) override {
    if (!gatherer_) return use();
    gatherer_->gather_all();
    use();
    gatherer_->keep_changes_and_release_all();
  }

  // This rank's pieces of the parameters (stage 3: over its shards).
  ckpt::TensorSlices owned_weights() const override {
    ckpt::TensorSlices weights;
    for (size_t k = 0; k < pieces_.size(); ++k) {
      const ddp::ShardPiece& piece = pieces_[k];
      weights.push_back({names_[piece.parameter], parameters_[piece.parameter].sizes().vec(), piece.parameter_offset,
                         piece_tensors_[k]});
    }
    return weights;
  }

  // `weights` and, as a replicated run stores them, each tied parameter's slices again under its
  // second name (model.h, TiedParameter), so any stage and world size resumes from them.
  ckpt::TensorSlices with_tied_names(ckpt::TensorSlices weights) const {
    const size_t own = weights.size();
    for (const model::TiedParameter& tied : model_.tied_parameters()) {
      for (size_t i = 0; i < own; ++i) {
        if (weights[i].name != tied.same_as) continue;
        ckpt::TensorSlice alias = weights[i];
        alias.name = tied.name;
        weights.push_back(std::move(alias));
      }
    }
    return weights;
  }

  void owned_weights_changed() override {
    if (gatherer_) {
      gatherer_->release_all();  // a gather started before the change holds the old values
    } else {
      gather_parameters();
    }
  }

  observe::HeldBytes held_bytes() const override {
    observe::HeldBytes held;
    std::int64_t owned = 0;
    for (const auto& p : parameters_) held.parameters += static_cast<std::int64_t>(p.nbytes());
    if (gatherer_) held.parameters = gatherer_->shard_bytes();
    for (const auto& piece : pieces_) owned += piece.numel;
    held.gradients = sync_->gradient_bytes();
    held.optimizer_state = owned * optim::optimizer_state_bytes_per_element(optim_);
    return held;
  }

 private:
  // One bucket's all-gather of the updated chunks, in flight.
  struct Gathering {
    size_t bucket;
    at::Tensor all;  // every rank's chunk, this rank's written in place
    std::unique_ptr<comm::Work> work;
  };

  c10::Device device() const { return parameters_.front().device(); }

  // Stage 3: one unit per block of the model (or run of small blocks up to dist.bucket_mb), each
  // reduced as one bucket, whose gathered parameters are freed as soon as their gradients are
  // all in.
  void shard_parameters(ddp::GradSyncOptions& options) {
    HT_CHECK(!model_.blocks().empty(), "Strategy::model_refusal refuses a model without blocks at stage 3");
    const UnitPlan plan = plan_units(model_, parameters_, options.bucket_bytes);
    gatherer_ = std::make_unique<BlockGatherer>(comm_, parameters_, plan, pool_, model_.deferred_weights());
    options.buckets = plan.units;
    options.on_filled = [gatherer = gatherer_.get()](size_t unit) { gatherer->release(unit); };
  }

  std::vector<at::Tensor> shards() const {
    std::vector<at::Tensor> out;
    for (size_t b = 0; b < sync_->bucket_count(); ++b) out.push_back(sync_->shard(b));
    return out;
  }

  // Bucket by bucket, this rank's updated chunk goes to every rank and every rank's chunk into the
  // parameters, gathered in place (the rank's chunk is its part of the gathered bucket); two
  // buckets in flight at most, so the gathered copies never approach the model's size.
  void gather_parameters() {
    c10::NoGradGuard no_grad;
    std::deque<Gathering> in_flight;
    size_t next_piece = 0;
    for (size_t b = 0; b < sync_->bucket_count(); ++b) {
      const at::Tensor& shard = sync_->shard(b);
      Gathering gather{b, pool_.empty(shard.numel() * comm_.size(), shard.options()), nullptr};
      at::Tensor mine = gather.all.narrow(0, shard.numel() * comm_.rank(), shard.numel());
      mine.zero_();  // the padding
      for (; next_piece < pieces_.size() && pieces_[next_piece].bucket == b; ++next_piece) {
        const ddp::ShardPiece& piece = pieces_[next_piece];
        mine.narrow(0, piece.shard_offset, piece.numel).copy_(piece_tensors_[next_piece]);
      }
      gather.work = comm_.allgather(mine, gather.all);
      in_flight.push_back(std::move(gather));
      if (in_flight.size() > 1) {
        scatter_into_parameters(in_flight.front());
        in_flight.pop_front();
      }
    }
    for (auto& gather : in_flight) scatter_into_parameters(gather);
  }

  void scatter_into_parameters(Gathering& gather) {
    gather.work->wait();
    std::int64_t offset = 0;
    for (const size_t p : sync_->buckets()[gather.bucket].parameters) {
      parameters_[p].detach().view({-1}).copy_(gather.all.narrow(0, offset, parameters_[p].numel()));
      offset += parameters_[p].numel();
    }
  }

  int stage_;
  config::OptimConfig optim_;
  comm::Communicator& comm_;
  model::Model& model_;
  std::vector<std::string> names_;      // of parameters_, in the module's order
  std::vector<at::Tensor> parameters_;  // in the module's order
  ddp::BufferPool pool_;                // buckets, gathered units and all-gathers, reused every step
  std::unique_ptr<BlockGatherer> gatherer_;  // stage 3; outlives sync_, which calls it
  std::unique_ptr<ddp::GradSync> sync_;
  std::vector<ddp::ShardPiece> pieces_;        // this rank's, bucket by bucket
  std::vector<at::Tensor> piece_tensors_;      // of pieces_: the parameters' elements, their shards' gradients
  std::map<std::string, size_t> piece_of_;     // parameter name -> its piece on this rank
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<std::string> piece_names_;       // the optimizer's parameters' names, in its order
};

}  // namespace

std::unique_ptr<GradientUpdate> sharded_update(const config::Config& config, comm::Communicator& comm,
                                               const optim::NamedParameters& trainable, model::Model& model) {
  return std::make_unique<ShardedUpdate>(config, comm, trainable, model);
}

}  // namespace hpctrain::sharding
