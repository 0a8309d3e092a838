// `hpctrain bench step`: one training step of a model taken apart: forward+backward alone, the
// gradient reduction alone (bucketed, and as one allreduce of all gradient bytes), and the whole
// step with GradSync with overlap off and on; exposed communication = step - compute.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <functional>

#include "bench.h"
#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/ddp/grad_sync.h"
#include "hpctrain/model/model.h"
#include "hpctrain/train/device.h"
#include "hpctrain/train/preflight.h"
#include "runtime.h"

namespace hpctrain::cli {
namespace {

const char* const kStepUsage =
    "usage: [mpirun -np N] hpctrain bench step [--model fashion_cnn|mlp] [--batch-size 64]\n"
    "                                          [--steps 20] [--bucket-mb 25] [--device cpu|cuda]\n\n"
    "Times one training step of --model on random Fashion-MNIST-shaped data (1x28x28, 10\n"
    "classes), batch --batch-size per rank: forward+backward alone; the gradient reduction alone,\n"
    "through GradSync's buckets of --bucket-mb and as one allreduce of all gradient bytes; and the\n"
    "whole step with GradSync, overlap off and on. 3 untimed steps, then --steps timed ones;\n"
    "medians over steps, of the slowest rank. exposed = step - forward+backward: the communication\n"
    "the step waits for. With one rank GradSync has nothing to do and adds nothing.\n";

// Median over `steps` timed runs (after 3 untimed) of `work`, the slowest rank's.
double time_step(const comm::Bootstrap& bootstrap, c10::Device device, int steps,
                 const std::function<void()>& work) {
  const auto synced = [&] {
    work();
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  synced();  // with time_passes' own untimed pass: 3 untimed steps
  synced();
  const double mine = median(time_passes(steps, synced));
  // The slowest rank decides: max through a sum of one-hot contributions.
  std::vector<float> all(static_cast<size_t>(bootstrap.world_size()), 0.0f);
  all[static_cast<size_t>(bootstrap.world_rank())] = static_cast<float>(mine);
  bootstrap.allreduce_sum(all.data(), static_cast<std::int64_t>(all.size()));
  return *std::max_element(all.begin(), all.end());
}

}  // namespace

const char* bench_step_usage() { return kStepUsage; }

int bench_step(const config::ParsedArgs& parsed) {
  config::ModelConfig model_config;
  model_config.name = parsed.has("model") ? parsed.flags.at("model") : "fashion_cnn";
  model_config.mlp_hidden = "512,256";
  model_config.dropout = 0.0;
  const std::int64_t batch = int_flag(parsed, "bench step", "batch-size", "64");
  const auto steps = static_cast<int>(int_flag(parsed, "bench step", "steps", "20"));
  const std::int64_t bucket_mb = int_flag(parsed, "bench step", "bucket-mb", "25");
  const std::string device_option = parsed.has("device") ? parsed.flags.at("device") : "cpu";
  if (batch < 1 || steps < 1 || bucket_mb < 1) {
    throw ConfigError("bench step: --batch-size, --steps and --bucket-mb must be >= 1");
  }
  if (device_option != "cpu" && device_option != "cuda") {
    throw ConfigError("bench step: --device must be cpu or cuda, got '" + device_option + "'");
  }
  const bool use_cuda = device_option == "cuda";
  if (use_cuda && train::visible_gpus() == 0) {
    throw ConfigError("bench step --device cuda: libtorch sees no GPU (CPU-only libtorch, no GPU, "
                      "or CUDA_VISIBLE_DEVICES hides them); use --device cpu");
  }
  comm::validate_backend("auto", use_cuda);
  auto net = model::make_model(model_config, {{1, 28, 28}, 10});  // throws for an unknown model

  config::LogConfig log_config;
  log_config.level = "info";
  init_early_logging(log_config);
  const auto bootstrap = start_mpi(log_config, default_timeout_s());
  const c10::Device device = train::device_for_rank(use_cuda, bootstrap->topology(), false);
  train::check_devices(*bootstrap, device, /*allow_shared_gpu=*/false);  // shared GPUs would skew it
  const auto comm = comm::make_communicator("auto", *bootstrap, use_cuda, use_cuda ? device.index() : 0);
  torch::manual_seed(7 + static_cast<std::uint64_t>(bootstrap->world_rank()));
  net->module().to(device);
  net->module().train();
  const std::vector<at::Tensor> parameters = net->module().parameters();
  const at::Tensor input = torch::rand({batch, 1, 28, 28}, torch::TensorOptions().device(device));
  const at::Tensor target = torch::randint(0, 10, {batch}, torch::TensorOptions().dtype(torch::kLong).device(device));
  const auto forward_backward = [&] {
    for (const auto& p : parameters) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
    torch::nn::functional::cross_entropy(net->forward(input), target).backward();
  };

  const double compute_s = time_step(*bootstrap, device, steps, forward_backward);
  std::int64_t numel = 0;
  for (const auto& p : parameters) numel += p.numel();
  at::Tensor flat = torch::zeros({numel}, parameters.front().options());
  const double flat_s = time_step(*bootstrap, device, steps,
                                  [&] { comm->allreduce_blocking(flat, comm::ReduceOp::kAvg); });

  ddp::GradSyncOptions options;
  options.bucket_bytes = bucket_mb << 20;
  options.warn_unused = false;  // "buckets alone" reduces without a backward on purpose
  double bucketed_s = 0.0;
  double step_s[2] = {0.0, 0.0};
  size_t buckets = 0;
  for (const bool overlap : {false, true}) {
    options.overlap = overlap;
    ddp::GradSync sync(*comm, parameters, options);
    buckets = sync.bucket_count();
    if (!overlap) bucketed_s = time_step(*bootstrap, device, steps, [&] { sync.average_gradients(); });
    step_s[overlap ? 1 : 0] = time_step(*bootstrap, device, steps, [&] {
      sync.begin_backward(true);
      forward_backward();
      sync.average_gradients();
    });
  }

  if (bootstrap->world_rank() == 0) {
    const double ms = 1e3;
    std::printf("# bench step: %s, %lld parameters (%.1f MB of float32 gradients) in %zu bucket(s) of "
                "%lld MiB, batch %lld per rank, %d rank(s) on %s, backend %s\n"
                "# median of %d timed steps after 3 untimed, slowest rank\n",
                model_config.name.c_str(), static_cast<long long>(numel), numel * 4 / 1e6, buckets,
                static_cast<long long>(bucket_mb), static_cast<long long>(batch), comm->size(),
                device.str().c_str(), comm->backend().c_str(), steps);
    std::printf("%-34s %10s %12s\n", "case", "ms", "samples/s");
    const auto row = [&](const char* name, double seconds, bool rate) {
      if (rate) {
        std::printf("%-34s %10.3f %12.0f\n", name, seconds * ms, batch * comm->size() / seconds);
      } else {
        std::printf("%-34s %10.3f %12s\n", name, seconds * ms, "-");
      }
    };
    row("forward+backward", compute_s, true);
    row("one allreduce of all gradients", flat_s, false);
    row("GradSync buckets alone", bucketed_s, false);
    row("step, overlap off", step_s[0], true);
    row("step, overlap on", step_s[1], true);
    std::printf("exposed communication: overlap off %.3f ms, on %.3f ms\n", (step_s[0] - compute_s) * ms,
                (step_s[1] - compute_s) * ms);
    std::printf("buckets / one allreduce: %.2f\n", bucketed_s / flat_s);
  }
  log::shutdown();
  return 0;
}

}  // namespace hpctrain::cli
