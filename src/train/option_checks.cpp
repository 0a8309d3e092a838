#include "hpctrain/train/option_checks.h"

#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"
#include "hpctrain/model/lora.h"
#include "hpctrain/model/model.h"
#include "hpctrain/optim/loss_scaler.h"
#include "hpctrain/optim/lr_schedule.h"
#include "hpctrain/optim/optimizer.h"
#include "hpctrain/runtime/global_batch.h"
#include "hpctrain/sharding/strategy.h"
#include "hpctrain/train/cuda_graph.h"
#include "hpctrain/train/objective.h"
#include "hpctrain/weights/model_weights.h"

namespace hpctrain::train {
namespace {

void check_precision(const config::Config& config, const Placement& where) {
  if (where.training && config.train.precision == config::Precision::kFp16 && !where.use_cuda) {  // eval: float32
    throw ConfigError("train.precision=fp16 needs a GPU (dist.device=cuda or auto with one visible): on the CPU "
                      "autocast computes in bfloat16 only; use train.precision=bf16 there");
  }
  if (config.train.nonfinite == config::Nonfinite::kAbort && optim::uses_loss_scaling(config.train)) {
    throw ConfigError(std::string("train.nonfinite=abort with dynamic loss scaling (train.loss_scale=") +
                      config::name_of(config.train.loss_scale) + ", train.precision=" +
                      config::name_of(config.train.precision) + "): the scaler finds its scale by "
                      "skipping overflowing steps; use train.nonfinite=skip (train.max_skipped bounds a run "
                      "of them) or train.loss_scale=none");
  }
}

void check_data_options(const config::Config& config) {
  if (config.data.shuffle_window_mb * 2 > config.data.cache_mb) {
    throw ConfigError("data.shuffle_window_mb=" + std::to_string(config.data.shuffle_window_mb) +
                      " needs data.cache_mb >= " + std::to_string(2 * config.data.shuffle_window_mb) +
                      " (the window being read and the next are held in memory; data.cache_mb is " +
                      std::to_string(config.data.cache_mb) + "); raise data.cache_mb or lower the window");
  }
}

}  // namespace

void check_options(const config::Config& config, const Placement& where) {
  comm::validate_backend(config.dist.backend, where.use_cuda);
  check_precision(config, where);
  optim::check_optimizer_options(config.optim);
  optim::check_schedule_options(config.optim);
  make_objective(config);  // throws for a model the objective cannot train
  model::check_lora_options(config.model);
  if (where.training) runtime::accumulation_steps(config.train, where.world_size);
  const std::string sharding_refusal = sharding::Strategy(config.dist).refusal(config);
  if (!sharding_refusal.empty()) throw ConfigError(sharding_refusal);
  check_data_options(config);
  if (where.training) check_cuda_graphs(config, where);
}

void check_model_options(const config::Config& config, model::Model& model) {
  const std::string refusal =
      sharding::Strategy(config.dist).model_refusal(weights::trainable_parameters(model.module()), model);
  if (!refusal.empty()) throw ConfigError(refusal);
}

void check_mpi_threads(const config::Config& config, bool thread_multiple) {
  const sharding::Strategy strategy(config.dist);
  if (thread_multiple || !config.ckpt.async || !strategy.shards_state()) return;
  throw ConfigError("ckpt.async=true with " + strategy.option() +
                    ": every rank writes its part of a sharded checkpoint in the background, which needs "
                    "MPI_THREAD_MULTIPLE, and this MPI does not provide it; set ckpt.async=false");
}

std::string cuda_graphs_refusal(const config::Config& config, const Placement& where) {
  if (!CapturedWork::available()) {
    return "this hpctrain was built without CUDA graphs (a CPU libtorch, no CUDA toolkit found, or "
           "-DHPCTRAIN_WITH_CUDA_GRAPHS=OFF)";
  }
  if (!where.use_cuda) return "CUDA graphs need a GPU (dist.device=cuda)";
  if (where.world_size > 1) {
    return "it runs on one rank so far: GradSync's reduction during backward is not captured yet";
  }
  if (sharding::Strategy(config.dist).shards_state()) return "it does not work with dist.zero_stage > 0 yet";
  if (optim::uses_loss_scaling(config.train)) {
    return "dynamic loss scaling (train.loss_scale, fp16's default) changes the scale between steps, and a "
           "graph would keep the first";
  }
  if (config.model.activation_checkpointing) {
    return "model.activation_checkpointing saves and restores random-generator states on the host";
  }
  if (config.train.objective == config::Objective::kDiffusion) {
    return "the diffusion objective draws its noise per sample on the host";
  }
  return "";
}

void check_cuda_graphs(const config::Config& config, const Placement& where) {
  if (!config.train.cuda_graphs) return;
  const std::string refusal = cuda_graphs_refusal(config, where);
  if (!refusal.empty()) throw ConfigError("train.cuda_graphs=true: " + refusal + "; set train.cuda_graphs=false");
}

}  // namespace hpctrain::train
