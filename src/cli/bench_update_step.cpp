// `hpctrain bench step --update`: whole optimizer steps as training takes them (train::Step:
// forward, backward, the finiteness check and the AdamW update), one Step per way of taking them,
// timed in turn step by step: AdamW one tensor at a time (optim.fused=false), as multi-tensor
// kernels (optim.fused=true), and with --cuda-graphs also forward+backward replayed from a CUDA
// graph (train.cuda_graphs=true). --profile writes a trace of the multi-tensor step (the GPU's
// kernels and the host's operators, Chrome trace-event JSON) that jobs/bench/profile_summary.py
// sums up.
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <set>

#include "bench.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/ddp/block_cache.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/observe/mfu.h"
#include "hpctrain/runtime/device.h"
#include "hpctrain/runtime/preflight.h"
#include "hpctrain/train/step.h"

namespace hpctrain::cli {
namespace {

struct UpdateCase {
  const char* name;
  bool fused;
  bool cuda_graphs;
};

config::Config case_config(const BenchModel& bench, const UpdateCase& how, const StepOptions& options) {
  config::Config config = step_config(bench, {{"optim.name", "adamw"},
                                              {"optim.fused", how.fused ? "true" : "false"},
                                              {"train.cuda_graphs", how.cuda_graphs ? "true" : "false"},
                                              {"train.tf32", options.tf32 ? "true" : "false"},
                                              {"dist.bucket_mb", std::to_string(options.bucket_mb)},
                                              {"dist.device", options.use_cuda ? "cuda" : "cpu"}});
  config.train.precision = options.precision;
  return config;
}

// Writes a trace of `steps` runs of `work` to `path` with libtorch's profiler (Kineto): the host's
// operators, and on a GPU its kernels and copies. With no work, checks that this libtorch can.
void profile_steps(const std::string& path, c10::Device device, int steps, const std::function<void()>& work) {
  namespace profiler = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  std::set<ActivityType> activities{ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  try {
    profiler::prepareProfiler(config, activities);
    profiler::enableProfiler(config, activities);
    for (int s = 0; s < steps; ++s) work();
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
    profiler::disableProfiler()->save(path);
  } catch (const c10::Error& e) {
    throw ConfigError("bench step --profile " + path + ": " + e.what_without_backtrace() +
                      " (libtorch's profiler needs a libtorch built with Kineto, as PyTorch's wheels are)");
  }
}

// Where the steps ran.
struct Place {
  int ranks;
  c10::Device device;
  std::string gpu;  // "" on a CPU
};

// The header, a row per case and the speed ratios, on rank 0.
void report(const BenchModel& bench, const StepOptions& options, const Place& place,
            const std::vector<UpdateCase>& cases, const std::vector<Spread>& step_s, double flops) {
  const bool tf32_note = options.use_cuda && options.precision == config::Precision::kFp32 && options.tf32;
  std::printf("# bench step --update: %s, batch %lld per rank, %d rank(s) on %s%s%s, %s%s; whole optimizer "
              "steps (train::Step, AdamW), one model per case\n"
              "# %.4g GFLOP per sample trained (3x forward); median, min and max of %d timed steps after 3 "
              "untimed, timed in turn, slowest rank\n",
              config::name_of(bench.config.name), static_cast<long long>(options.batch), place.ranks,
              place.device.str().c_str(), place.gpu.empty() ? "" : " ", place.gpu.c_str(),
              options.precision_name.c_str(), tf32_note ? " (TF32)" : "", flops / 1e9, options.steps);
  const StepTable table(bench.spec, options.batch, place.ranks, flops,
                        observe::resolve_peak_flops(0, place.gpu, options.precision, options.tf32));
  table.print_header();
  for (size_t c = 0; c < cases.size(); ++c) table.row(cases[c].name, step_s[c], true);
  std::printf("multi-tensor / per tensor speed: %.3f\n", step_s[0].median / step_s[1].median);
  if (cases.size() > 2) std::printf("CUDA graph / multi-tensor speed: %.3f\n", step_s[1].median / step_s[2].median);
}

}  // namespace

int bench_update_step(const config::ParsedArgs& parsed, const BenchModel& bench, const StepOptions& options) {
  const bool graphs = parsed.has("cuda-graphs");
  if (graphs && !options.use_cuda) throw ConfigError("bench step --cuda-graphs needs --device cuda");
  if (graphs && options.precision == config::Precision::kFp16) {
    throw ConfigError("bench step --cuda-graphs: not with --precision fp16, whose loss scale changes between steps");
  }
  std::vector<UpdateCase> cases{{"step, AdamW per tensor", false, false}, {"step, AdamW multi-tensor", true, false}};
  if (graphs) cases.push_back({"step, multi-tensor + CUDA graph", true, true});
  const std::string profile = text_flag(parsed, "profile", "");

  const Ranks ranks = start_ranks(bench_start(options.use_cuda, config::Backend::kAuto, options.check_collectives));
  const auto& bootstrap = ranks.bootstrap;
  const c10::Device device = ranks.device;
  if (graphs && ranks.comm->size() > 1) throw ConfigError("bench step --cuda-graphs runs on one rank so far");
  if (!profile.empty()) profile_steps(profile, device, 0, [] {});  // can it, before the timing?
  runtime::set_cuda_math(options.tf32, /*cudnn_benchmark=*/false);
  std::vector<std::unique_ptr<train::Step>> steps;
  for (const UpdateCase& how : cases) {
    torch::manual_seed(7);  // every case starts from the same weights
    const config::Config config = case_config(bench, how, options);
    steps.push_back(std::make_unique<train::Step>(model::make_model(config.model, bench.spec), config, *ranks.comm,
                                                  device));
  }
  const std::vector<data::Batch> micro_batches{random_batch(bench.spec, options.batch, ranks.comm->size(), device)};
  const train::StepPlan plan{1e-4, false};
  std::vector<BenchCase> timed;
  for (size_t c = 0; c < cases.size(); ++c) {
    timed.push_back({cases[c].name, [&micro_batches, &plan, s = steps[c].get()] { s->run(micro_batches, plan); }});
  }
  ddp::trim_block_cache();  // as the trainer does before its first step
  const auto seconds = time_in_turn(timed, {3, options.steps, device});
  if (!profile.empty()) profile_steps(profile, device, 3, timed[1].run);
  const std::int64_t gpu_memory = options.use_cuda ? comm::gpu_memory_in_use_bytes(device.index()) : -1;

  std::vector<Spread> step_s;
  for (const auto& s : seconds) step_s.push_back(slowest_spread(*bootstrap, s));
  if (bootstrap->world_rank() == 0) {
    const std::string gpu = options.use_cuda ? comm::gpu_name(device.index()) : "";
    const double flops = steps.front()->training_flops().value_or(0);
    report(bench, options, {ranks.comm->size(), device, gpu}, cases, step_s, flops);
    if (!profile.empty()) std::printf("profile of 3 multi-tensor steps: %s\n", profile.c_str());
    if (gpu_memory >= 0) std::printf("GPU memory in use (driver's count): %.0f MiB\n", gpu_memory / 1048576.0);
  }
  log::shutdown();
  return 0;
}

}  // namespace hpctrain::cli
