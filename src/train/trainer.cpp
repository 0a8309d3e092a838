#include "hpctrain/train/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <ctime>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/core/version.h"
#include "hpctrain/data/distributed_sampler.h"
#include "hpctrain/data/loader.h"
#include "hpctrain/ddp/grad_sync.h"
#include "hpctrain/model/batch_norm.h"
#include "hpctrain/model/model.h"
#include "hpctrain/train/device.h"
#include "hpctrain/train/metrics_writer.h"
#include "hpctrain/train/optimizer.h"
#include "hpctrain/train/step_loss.h"

namespace hpctrain::train {
namespace {

std::vector<at::Tensor> buffers_of(torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  for (auto& b : module.buffers()) out.push_back(b);
  return out;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

}  // namespace

ckpt::NamedTensors model_state(model::Model& model) {
  ckpt::NamedTensors out;
  for (auto& p : model.module().named_parameters()) out.emplace_back(p.key(), p.value());
  for (auto& b : model.module().named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

int configure_threads(const config::TrainConfig& train) {
  const int threads = train.threads > 0 ? static_cast<int>(train.threads) : sys::affinity_cores();
  at::set_num_threads(threads);
  return threads;
}

TrainingSetup prepare_training(const config::Config& config, bool need_train_split) {
  const bool use_cuda = resolve_use_cuda(config.dist.device, visible_gpus());
  comm::validate_backend(config.dist.backend, use_cuda);
  const int threads = configure_threads(config.train);
  // Same seed everywhere: every rank builds identical initial weights (rank 0's are broadcast
  // anyway, so a rank with a different libtorch still starts from the same point).
  torch::manual_seed(static_cast<std::uint64_t>(config.train.seed));
  std::optional<data::Split> train_split;
  const std::int64_t cache_bytes = config.data.cache_mb << 20;
  if (need_train_split) {
    train_split = data::Split::load(config.data.path, config.data.train_split, cache_bytes);
  }
  std::optional<data::Split> eval_split;
  if (!config.data.eval_split.empty()) {
    eval_split = data::Split::load(config.data.path, config.data.eval_split, cache_bytes);
  }
  HT_CHECK(train_split || eval_split, "nothing to load: no train split and no eval split");
  const data::Split& any = train_split ? *train_split : *eval_split;
  const model::ModelSpec spec{any.sample_shape(), any.manifest().num_classes};
  auto net = model::make_model(config.model, spec);
  return {config, std::move(train_split), std::move(eval_split), net, threads, use_cuda};
}

struct Trainer::State {
  TrainingSetup setup;
  comm::Bootstrap& bootstrap;
  RunDirectory run_dir;
  c10::Device device;
  std::unique_ptr<comm::Communicator> comm;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<ddp::GradSync> grad_sync;
  std::vector<at::Tensor> buffers;
  MetricsWriter metrics;
  std::int64_t step = 0;

  State(TrainingSetup s, comm::Bootstrap& b, RunDirectory dir)
      : setup(std::move(s)), bootstrap(b), run_dir(std::move(dir)),
        device(device_for_rank(setup.use_cuda, b.topology(), setup.config.dist.allow_shared_gpu)),
        metrics(run_dir.metrics_path(), b.world_rank() == 0) {}

  const config::Config& config() const { return setup.config; }
  model::Model& net() { return *setup.model; }

  // Note [Buffers follow rank 0]: BatchNorm running statistics are not gradients; each rank's would
  // drift with its own batches. As in PyTorch DDP they are overwritten with rank 0's before every
  // forward, and again before evaluation and checkpoints, so every replica holds the same model.
  void sync_buffers() {
    if (!buffers.empty() && comm->size() > 1) ddp::broadcast_tensors(*comm, buffers, 0);
  }

  // data.io=mpio: the split is read once by all ranks together, before the first epoch.
  void read_train_split_collectively() {
    if (config().data.io != "mpio" || !setup.train_split) return;
    if (!setup.train_split->caches_blocks()) {
      log::warn("data.io=mpio applies to a split held in memory; '{}' is larger than data.cache_mb={} "
                "and is read per batch with POSIX reads",
                config().data.train_split, config().data.cache_mb);
      return;
    }
    const Timer timer;
    setup.train_split->preload_collective();
    log::info("split '{}' read through MPI-IO by {} rank(s) in {:.2f} s", config().data.train_split,
              bootstrap.world_size(), timer.elapsed_s());
  }

  // dist.check_replicas_every: every replica must hold rank 0's parameters, bit for bit.
  void check_replicas() {
    const std::int64_t every = config().dist.check_replicas_every;
    if (every == 0 || step % every != 0) return;
    const std::vector<int> differ =
        ddp::ranks_differing_from_root(*comm, net().module().parameters(), device);
    if (differ.empty()) return;
    std::string ranks;
    for (const int r : differ) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    throw Error("parameters of rank(s) " + ranks + " differ from rank 0's after step " +
                std::to_string(step) + " (dist.check_replicas_every=" + std::to_string(every) +
                "): a rank-dependent code path or a nondeterministic reduction; rerun with "
                "--dist.check_replicas_every=1 to find the first step");
  }

  // dist.sync_bn: BatchNorm layers reduce their statistics over the ranks (model/batch_norm.h).
  void synchronize_batch_norm() {
    if (!config().dist.sync_bn) return;
    model::BatchStatsReducer reduce;
    if (comm->size() > 1) {
      reduce = [c = comm.get()](at::Tensor& stats) { c->allreduce(stats, comm::ReduceOp::kSum)->wait(); };
    }
    const int layers = model::set_batch_stats_reducer(net().module(), reduce);
    if (layers == 0) {
      log::warn("dist.sync_bn=true, but model {} has no BatchNorm layer; nothing to synchronize",
                config().model.name);
    } else {
      log::info("dist.sync_bn: {} BatchNorm layer(s) normalize over the batches of all {} rank(s)", layers,
                comm->size());
    }
  }

  bool step_limit_reached() const {
    return config().train.max_steps > 0 && step >= config().train.max_steps;
  }

  void train_epoch(std::int64_t epoch, const data::DistributedSampler& sampler);
  void log_progress(std::int64_t epoch, std::int64_t step_in_epoch, std::int64_t steps_per_epoch,
                    at::Tensor& loss_sum, double& real_samples, Timer& interval);
  std::optional<EvalResult> evaluate_epoch(std::int64_t epoch);
  std::string save_checkpoint(std::int64_t epoch);
};

Trainer::Trainer(TrainingSetup setup, comm::Bootstrap& bootstrap, RunDirectory run_dir)
    : state_(std::make_unique<State>(std::move(setup), bootstrap, std::move(run_dir))) {
  State& s = *state_;
  s.read_train_split_collectively();
  torch::nn::Module& module = s.net().module();
  module.to(s.device);
  s.comm = comm::make_communicator(s.config().dist.backend, bootstrap, s.setup.use_cuda,
                                   s.device.is_cuda() ? s.device.index() : 0,
                                   s.config().dist.timeout_s);
  std::vector<at::Tensor> parameters = module.parameters();
  s.buffers = buffers_of(module);
  std::vector<at::Tensor> everything = parameters;
  everything.insert(everything.end(), s.buffers.begin(), s.buffers.end());
  ddp::broadcast_tensors(*s.comm, everything, 0);
  ddp::GradSyncOptions sync_options;
  sync_options.bucket_bytes = static_cast<std::int64_t>(s.config().dist.bucket_mb * (1 << 20));
  sync_options.overlap = s.config().dist.overlap;
  const std::string& compression = s.config().dist.grad_compression;
  if (compression != "none") sync_options.wire_dtype = compression == "fp16" ? at::kHalf : at::kBFloat16;
  s.grad_sync = std::make_unique<ddp::GradSync>(*s.comm, parameters, sync_options);
  s.synchronize_batch_norm();
  s.optimizer = make_optimizer(s.config().optim, parameters);
  // Dropout masks differ per rank (as separate processes would in PyTorch DDP), reproducibly.
  torch::manual_seed(static_cast<std::uint64_t>(s.config().train.seed) * 1000003ULL +
                     static_cast<std::uint64_t>(bootstrap.world_rank()) + 1);
  std::int64_t count = 0;
  for (const auto& p : parameters) count += p.numel();
  log::info("model {}: {} parameters in {} tensors, {} buffers; device {}, backend {}, {} rank(s)",
            s.config().model.name, count, parameters.size(), s.buffers.size(), s.device.str(),
            s.comm->backend(), s.comm->size());
}

Trainer::~Trainer() = default;

void Trainer::State::train_epoch(std::int64_t epoch, const data::DistributedSampler& sampler) {
  net().module().train();
  // The whole epoch's plan up front, so the loader can read ahead of the loop.
  const std::vector<data::SamplerStep> plans = sampler.steps(sampler.global_order(epoch), 0);
  // An optimizer step is train.accum_steps sampler steps (micro-batches); the epoch's last may
  // have fewer.
  const auto micro_batches = static_cast<std::int64_t>(plans.size());
  const std::int64_t accum = config().train.accum_steps;
  const std::int64_t steps_per_epoch = (micro_batches + accum - 1) / accum;
  std::vector<std::vector<std::int64_t>> step_indices;
  for (const auto& plan : plans) step_indices.push_back(plan.indices);
  // On a GPU, batches are assembled in pinned memory so that their copy to the device below
  // is asynchronous and overlaps the previous step's kernels.
  const bool pinned = device.is_cuda();
  data::Loader loader(
      [split = *setup.train_split, pinned](const std::vector<std::int64_t>& indices) {
        return split.gather(indices, pinned);
      },
      std::move(step_indices),
      {static_cast<int>(config().data.prefetch), static_cast<int>(config().data.loader_threads)});

  Timer interval;
  // Over this rank's real samples since the last log line. The loss stays on the device, so a
  // step never waits for the GPU to report it.
  at::Tensor loss_sum = torch::zeros({}, torch::dtype(torch::kFloat64).device(device));
  double real_samples = 0.0;
  for (std::int64_t i = 0; i < steps_per_epoch && !step_limit_reached(); ++i) {
    const std::int64_t first = i * accum;
    const std::int64_t count = std::min(accum, micro_batches - first);
    // Note [Masked mean]: every micro-batch's loss is divided by the real samples of the whole
    // step (all ranks, all micro-batches), so the accumulated, averaged gradient is the mean over
    // the step's real samples, as one process on the whole global batch would compute it.
    std::int64_t step_real = 0;
    for (std::int64_t j = first; j < first + count; ++j) step_real += plans[static_cast<size_t>(j)].global_real;

    sync_buffers();
    optimizer->zero_grad();
    for (std::int64_t j = first; j < first + count; ++j) {
      const data::SamplerStep& plan = plans[static_cast<size_t>(j)];
      const data::Batch batch = loader.next();
      const at::Tensor weights = torch::tensor(plan.weights).to(device);
      const at::Tensor losses = torch::nn::functional::cross_entropy(
          net().forward(setup.train_split->normalize(batch.input.to(device, /*non_blocking=*/true))),
          batch.target.to(device, /*non_blocking=*/true),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
      grad_sync->begin_backward(/*last_micro_batch=*/j + 1 == first + count);
      step_loss(losses, weights, comm->size(), step_real).backward();
      loss_sum += (losses.detach() * weights).sum();
      for (const float w : plan.weights) real_samples += w;
    }
    grad_sync->average_gradients();
    optimizer->step();
    ++step;
    check_replicas();

    const bool last = i + 1 == steps_per_epoch || step_limit_reached();
    if (step % config().log.every_steps == 0 || last) log_progress(epoch, i + 1, steps_per_epoch,
                                                                   loss_sum, real_samples, interval);
  }
}

void Trainer::State::log_progress(std::int64_t epoch, std::int64_t step_in_epoch,
                                  std::int64_t steps_per_epoch, at::Tensor& loss_sum,
                                  double& real_samples, Timer& interval) {
  // One small allreduce per log interval: the loss and throughput of the whole job.
  const std::vector<double> totals =
      ddp::sum_over_ranks(*comm, {loss_sum.item<double>(), real_samples}, device);
  const double mean_loss = totals[0] / totals[1];
  const double samples_per_s = totals[1] / interval.elapsed_s();
  const double lr = current_lr(*optimizer);
  log::info("epoch {} step {} ({}/{}) loss {:.4f} lr {:.3g} {:.0f} samples/s", epoch + 1, step,
            step_in_epoch, steps_per_epoch, mean_loss, lr, samples_per_s);
  metrics.write({{"step", step}, {"epoch", epoch + 1}, {"loss", mean_loss}, {"lr", lr},
                 {"samples_per_s", samples_per_s}});
  loss_sum.zero_();
  real_samples = 0.0;
  interval.reset();
}

std::optional<EvalResult> Trainer::State::evaluate_epoch(std::int64_t epoch) {
  if (!setup.eval_split) return std::nullopt;
  sync_buffers();
  const EvalResult result =
      evaluate(net(), *setup.eval_split, *comm, config().train.eval_batch_size, device);
  log::info("epoch {} eval on {} ({} samples): test_loss {:.4f} test_acc {:.4f}", epoch + 1,
            config().data.eval_split, result.samples, result.loss, result.accuracy);
  metrics.write({{"epoch", epoch + 1}, {"step", step}, {"test_loss", result.loss},
                 {"test_acc", result.accuracy}});
  return result;
}

std::string Trainer::State::save_checkpoint(std::int64_t epoch) {
  sync_buffers();
  std::string path;
  if (bootstrap.world_rank() == 0) {
    ckpt::CheckpointMeta meta;
    meta.hpctrain_version = version();
    meta.step = step;
    meta.epoch = epoch;
    meta.world_size = comm->size();
    meta.model_name = config().model.name;
    meta.config_text = config::to_ini(config());
    meta.created = utc_now();
    Timer timer;
    path = ckpt::write_checkpoint(run_dir.checkpoints_dir(), model_state(net()), meta);
    log::info("checkpoint {} written in {:.2f} s", path, timer.elapsed_s());
  }
  comm->barrier();  // no rank leaves before the checkpoint is on disk
  return path;
}

TrainSummary Trainer::run() {
  State& s = *state_;
  const config::TrainConfig& train = s.config().train;
  HT_CHECK(s.setup.train_split.has_value(), "Trainer needs a training split");
  data::SamplerOptions options;
  options.dataset_size = s.setup.train_split->size();
  options.world_size = s.comm->size();
  options.rank = s.comm->rank();
  options.batch_size = train.batch_size;
  options.seed = static_cast<std::uint64_t>(train.seed);
  options.shuffle = train.shuffle;
  options.drop_last = train.drop_last;
  const data::DistributedSampler sampler(options);
  log::info("training on {} samples: {} steps per epoch, global batch {} ({} ranks x {} "
            "micro-batch(es) x {}){}; gradients in {} bucket(s), overlap {}, compression {}",
            options.dataset_size, (sampler.steps_from(0) + train.accum_steps - 1) / train.accum_steps,
            train.batch_size * train.accum_steps * s.comm->size(), s.comm->size(), train.accum_steps,
            train.batch_size, train.drop_last ? ", last partial batch dropped" : "",
            s.grad_sync->bucket_count(), s.config().dist.overlap ? "on" : "off",
            s.config().dist.grad_compression);
  TrainSummary summary;
  std::int64_t epoch = 0;
  for (; epoch < train.epochs && !s.step_limit_reached(); ++epoch) {
    s.train_epoch(epoch, sampler);
    summary.last_eval = s.evaluate_epoch(epoch);  // also after an epoch cut short by max_steps
  }
  summary.steps = s.step;
  if (s.config().ckpt.save_final) summary.checkpoint = s.save_checkpoint(epoch);
  return summary;
}

}  // namespace hpctrain::train
