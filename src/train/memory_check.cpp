#include "hpctrain/train/memory_check.h"

#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/units.h"
#include "hpctrain/runtime/global_batch.h"
#include "hpctrain/runtime/preflight.h"
#include "hpctrain/sharding/strategy.h"
#include "hpctrain/train/trainer.h"
#include "hpctrain/weights/model_weights.h"
#include "memory_probe.h"

namespace hpctrain::train {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

MemoryNeed memory_need(const config::Config& config, const ItemBytes& train, std::int64_t read_ahead,
                       std::int64_t accumulation, const ItemBytes& eval, std::int64_t eval_items,
                       std::int64_t model_state, std::int64_t cache) {
  const std::int64_t batch = config.train.batch_size;
  MemoryNeed need;
  need.model_state = model_state;
  need.batches = accumulation * batch * ((read_ahead + 1) * train.read + train.on_device);
  need.activations = batch * train.kept;
  need.evaluation = eval_items * (eval.read + eval.on_device + eval.peak_no_grad);
  need.cache = cache;
  return need;
}

namespace {

struct NeedPart {
  std::int64_t bytes;
  const char* what;
  const char* remedy;
};

// The parts of a need, largest first, each with the option that lowers it.
std::vector<NeedPart> parts_by_size(const MemoryNeed& need) {
  std::vector<NeedPart> parts = {
      {need.batches, "batches read ahead", "lower train.batch_size or data.prefetch"},
      {need.activations, "the activations a forward keeps",
       "lower train.batch_size (train.global_batch keeps the global batch with more micro-batches)"},
      {need.model_state, "gradients and optimizer state", "raise dist.zero_stage to shard them"},
      {need.evaluation, "an evaluation batch", "lower train.eval_batch_size"},
      {need.cache, "the data cache", "lower data.cache_mb"}};
  std::stable_sort(parts.begin(), parts.end(), [](const NeedPart& a, const NeedPart& b) { return a.bytes > b.bytes; });
  return parts;
}

}  // namespace

std::string memory_problem(const MemoryNeed& need, std::int64_t available, int ranks_here, const std::string& host) {
  const std::int64_t total = need.total() * ranks_here;
  if (available <= 0 || total <= available) return "";
  const NeedPart largest = parts_by_size(need).front();
  std::string line = "the run needs about " + bytes_text(need.total()) + " more memory per rank";
  if (ranks_here > 1) line += ", " + bytes_text(total) + " for its " + std::to_string(ranks_here) + " ranks";
  return line + " on host " + host + ", which has " + bytes_text(available) + " available; most of it is " +
         largest.what + " (" + bytes_text(largest.bytes) + " per rank): " + largest.remedy;
}

namespace {

// The trainable parameters' elements and bytes.
std::pair<std::int64_t, std::int64_t> trainable(model::Model& model) {
  std::int64_t elements = 0;
  std::int64_t bytes = 0;
  for (const auto& [name, p] : weights::trainable_parameters(model.module())) {
    elements += p.numel();
    bytes += static_cast<std::int64_t>(p.nbytes());
  }
  return {elements, bytes};
}

// This rank's need, as far as the host holds it: on a GPU, what is read ahead and the cache.
MemoryNeed host_need(const TrainingSetup& setup, int world_size) {
  const config::Config& config = setup.config;
  const c10::Device host(c10::kCPU);  // the model is still on the host here
  // On a GPU the forward's memory is the GPU's: the probe only reads. A model whose weights are
  // still in the file (model.h, DeferredWeights) cannot run yet: its activations are left out.
  const bool runs = !setup.use_cuda && setup.model->deferred_weights().sources.empty();
  model::Model* model = runs ? setup.model.get() : nullptr;
  const std::unique_ptr<Objective> objective = make_objective(config);
  ItemBytes train = probe_item_bytes(model, *objective, *setup.train, host);
  ItemBytes eval;
  std::int64_t eval_items = 0;
  if (setup.eval) {  // its items have the train items' shape: the forward was measured on those
    eval = probe_item_bytes(nullptr, *objective, *setup.eval, host);
    eval.peak_no_grad = train.peak_no_grad;
    eval_items = std::min(config.train.eval_batch_size, ceil_div(setup.eval->items(), world_size));
  }
  const auto [elements, bytes] = trainable(*setup.model);
  std::int64_t model_state = sharding::Strategy(config.dist).state_bytes(elements, bytes, config, world_size);
  if (setup.use_cuda) {  // the GPU holds the finished batches and the state
    train.on_device = eval.on_device = 0;
    model_state = 0;
  }
  const std::int64_t read_ahead =
      config.data.prefetch > 0 ? std::max(config.data.prefetch, config.data.loader_threads) : 0;
  std::int64_t cache = setup.train->cache_bytes_to_come();
  if (setup.eval) cache += setup.eval->cache_bytes_to_come();
  return memory_need(config, train, read_ahead, runtime::accumulation_steps(config.train, world_size), eval, eval_items,
                     model_state, cache);
}

}  // namespace

void check_memory_fits(const TrainingSetup& setup, const comm::Bootstrap& bootstrap) {
  const comm::Topology& topology = bootstrap.topology();
  const MemoryNeed need = host_need(setup, topology.world_size);
  const std::int64_t available = sys::available_memory_bytes();
  const std::string host = sys::host_name();
  log::info("memory: each rank takes about {} more (batches {}, activations {}, gradients and optimizer state "
            "{}, evaluation {}, data cache {}){}; {} ranks on {}, which has {} available",
            bytes_text(need.total()), bytes_text(need.batches), bytes_text(need.activations),
            bytes_text(need.model_state), bytes_text(need.evaluation), bytes_text(need.cache),
            setup.use_cuda ? ", the host's part only: GPU memory is not estimated" : "", topology.local_size,
            host, bytes_text(available));
  const std::string mine = memory_problem(need, available, topology.local_size, host);
  std::vector<std::string> problems;
  for (std::string& line : bootstrap.allgather_string(mine)) {
    if (!line.empty() && std::find(problems.begin(), problems.end(), line) == problems.end()) {
      problems.push_back(std::move(line));
    }
  }
  runtime::fail_together(bootstrap, problems, "");
}

}  // namespace hpctrain::train
