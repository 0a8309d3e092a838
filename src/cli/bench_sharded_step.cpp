// `hpctrain bench step --zero-stage S`: whole optimizer steps through train::Step at
// dist.zero_stage S on random data, with what each rank holds and how far its peak RSS grew
// over the RSS before the model was built. One stage per process, so each process's memory is
// its stage's alone; jobs/bench/zero.sh runs the stages in turn and takes the ratios.
#include <torch/torch.h>

#include <cstdio>

#include "bench.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/data/split.h"
#include "hpctrain/ddp/block_cache.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/train/step.h"

namespace hpctrain::cli {

int bench_sharded_step(const config::ParsedArgs& parsed, const BenchModel& bench, const StepOptions& options) {
  const std::int64_t stage = int_flag(parsed, "bench step", "zero-stage", "0");
  const std::string optimizer = text_flag(parsed, "optimizer", "adamw");
  const std::int64_t batch = options.batch;
  const int steps = options.steps;
  const std::int64_t bucket_mb = options.bucket_mb;
  if (options.use_cuda) {
    throw ConfigError("bench step --zero-stage runs on --device cpu only so far");
  }
  // Checks the stage and the optimizer.
  const config::Config config = step_config(bench, {{"dist.zero_stage", std::to_string(stage)},
                                                    {"dist.bucket_mb", std::to_string(bucket_mb)},
                                                    {"optim.name", optimizer},
                                                    {"optim.momentum", "0.9"},
                                                    {"train.precision", options.precision_name}});
  const Ranks ranks = start_ranks(bench_start(false, config::Backend::kAuto, options.check_collectives));
  const auto& bootstrap = ranks.bootstrap;
  const auto& comm = ranks.comm;
  const std::int64_t rss_before = sys::current_rss_bytes();
  torch::manual_seed(7);
  std::shared_ptr<model::Model> net;
  {
    const sys::LargeAllocationsMapped mapped(stage > 0);  // as the trainer builds a model to shard
    net = model::make_model(config.model, bench.spec);
  }
  train::Step step(std::move(net), config, *comm, ranks.device);
  const std::vector<data::Batch> micro_batches{random_batch(bench.spec, batch, comm->size(), ranks.device)};
  ddp::trim_block_cache();  // as the trainer does before its first step
  // One untimed step, as before the driver: the peak RSS is of those steps alone.
  const std::vector<double> seconds =
      time_in_turn({{"step", [&] { step.run(micro_batches, {1e-4, false}); }}}, {1, steps, ranks.device})[0];
  const Spread step_s = slowest_spread(*bootstrap, seconds);
  const double growth = slowest_rank(*bootstrap, static_cast<double>(sys::peak_rss_bytes() - rss_before));
  const double before = slowest_rank(*bootstrap, static_cast<double>(rss_before));
  const observe::HeldBytes held = step.held_bytes();
  if (bootstrap->world_rank() == 0) {
    constexpr double kMiB = 1 << 20;
    std::printf("# bench step --zero-stage %lld: %s, %s, %s, batch %lld per rank, %d rank(s), buckets of %lld MiB; "
                "median, min and max of %d timed steps after 1 untimed, slowest rank\n",
                static_cast<long long>(stage), config::name_of(config.model.name), optimizer.c_str(),
                config::name_of(config.train.precision), static_cast<long long>(batch), comm->size(),
                static_cast<long long>(bucket_mb), steps);
    std::printf("optimizer step ms %.3f (min %.3f, max %.3f)\n", step_s.median * 1e3, step_s.min * 1e3,
                step_s.max * 1e3);
    std::printf("held MiB per rank: parameters %.1f gradients %.1f optimizer %.1f\n", held.parameters / kMiB,
                held.gradients / kMiB, held.optimizer_state / kMiB);
    std::printf("peak RSS growth MiB %.1f (largest rank; RSS before the model %.1f MiB)\n", growth / kMiB,
                before / kMiB);
  }
  log::shutdown();
  return 0;
}

}  // namespace hpctrain::cli
