// `hpctrain bench comm`: allreduce through hpctrain's communicator, size by size, next to a plain
// MPI_Allreduce of the same bytes on the host, with nccl-tests' bandwidth definitions.
#include <ATen/ATen.h>

#include <cstdio>
#include <memory>

#include "bench.h"
#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/units.h"
#include "hpctrain/train/device.h"
#include "hpctrain/train/preflight.h"
#include "runtime.h"

namespace hpctrain::cli {
namespace {

const char* const kCommUsage =
    "usage: [mpirun -np N] hpctrain bench comm [--backend mpi|nccl] [--min-bytes 4KiB]\n"
    "                                          [--max-bytes 256MiB] [--iters 20]\n\n"
    "Allreduce (sum, float32) of every size from --min-bytes to --max-bytes, times 4 each step,\n"
    "through the mpi or nccl communicator (nccl: each rank on the GPU of its node-local rank),\n"
    "and a blocking MPI_Allreduce of the same bytes in host memory as the reference. 5 untimed\n"
    "warm-up calls, then --iters timed ones (nccl: queued back to back, then waited for; mpi:\n"
    "one after another); time is the mean per call, averaged over ranks. As in nccl-tests,\n"
    "algbw = bytes / time and busbw = algbw * 2(n-1)/n. The check allreduces rank+1 from every\n"
    "rank and compares each element with n(n+1)/2.\n";

constexpr int kWarmup = 5;

// Mean seconds per call of `iters` allreduces of `tensor` after the warm-up.
double time_allreduce(comm::Communicator& comm, at::Tensor& tensor, int iters) {
  for (int i = 0; i < kWarmup; ++i) comm.allreduce(tensor, comm::ReduceOp::kSum)->wait();
  // NCCL orders calls on its stream, so they can be queued; MPI calls on one buffer may not overlap.
  const bool queue = comm.backend() == "nccl";
  const Timer timer;
  std::vector<std::unique_ptr<comm::Work>> pending;
  for (int i = 0; i < iters; ++i) {
    pending.push_back(comm.allreduce(tensor, comm::ReduceOp::kSum));
    if (!queue) pending.back()->wait();
  }
  for (auto& work : pending) work->wait();
  return timer.elapsed_s() / iters;
}

double time_mpi_reference(const comm::Bootstrap& bootstrap, std::vector<float>& host, int iters) {
  const auto count = static_cast<std::int64_t>(host.size());
  for (int i = 0; i < kWarmup; ++i) bootstrap.allreduce_sum(host.data(), count);
  const Timer timer;
  for (int i = 0; i < iters; ++i) bootstrap.allreduce_sum(host.data(), count);
  return timer.elapsed_s() / iters;
}

// True when allreducing rank+1 gives n(n+1)/2 in every element.
bool check_allreduce(comm::Communicator& comm, at::Tensor& tensor) {
  const int n = comm.size();
  tensor.fill_(static_cast<float>(comm.rank() + 1));
  comm.allreduce(tensor, comm::ReduceOp::kSum)->wait();
  return tensor.eq(static_cast<float>(n * (n + 1) / 2)).all().item<bool>();
}

double mean_over_ranks(const comm::Bootstrap& bootstrap, double value) {
  float v = static_cast<float>(value);
  bootstrap.allreduce_sum(&v, 1);
  return v / bootstrap.world_size();
}

}  // namespace

const char* bench_comm_usage() { return kCommUsage; }

int bench_comm(const config::ParsedArgs& parsed) {
  const std::string backend = parsed.has("backend") ? parsed.flags.at("backend") : "mpi";
  const auto flag_bytes = [&](const char* name, const char* fallback) {
    return parse_bytes(parsed.has(name) ? parsed.flags.at(name) : fallback,
                       std::string("bench comm --") + name);
  };
  const std::int64_t min_bytes = flag_bytes("min-bytes", "4KiB");
  const std::int64_t max_bytes = flag_bytes("max-bytes", "256MiB");
  const auto iters = static_cast<int>(int_flag(parsed, "bench comm", "iters", "20"));
  if (min_bytes < 4 || max_bytes < min_bytes || iters < 1) {
    throw ConfigError("bench comm: need 4 <= --min-bytes <= --max-bytes and --iters >= 1");
  }
  const bool cuda = backend == "nccl";
  comm::validate_backend(backend, cuda);  // before MPI: the same answer on every rank
  if (cuda && train::visible_gpus() == 0) {
    throw ConfigError("bench comm --backend nccl: libtorch sees no GPU (CPU-only libtorch, no GPU, "
                      "or CUDA_VISIBLE_DEVICES hides them); use --backend mpi");
  }

  config::LogConfig log_config;
  log_config.level = "info";
  init_early_logging(log_config);
  const auto bootstrap = start_mpi(log_config, default_timeout_s());
  const c10::Device device = train::device_for_rank(cuda, bootstrap->topology(), false);
  train::check_devices(*bootstrap, device, /*allow_shared_gpu=*/false);  // shared GPUs would skew it
  const auto comm = comm::make_communicator(backend, *bootstrap, cuda, cuda ? device.index() : 0);
  const int n = comm->size();
  const double bus_factor = 2.0 * (n - 1) / n;

  if (bootstrap->world_rank() == 0) {
    std::printf("# bench comm: allreduce sum float32, backend %s on %s, %d rank(s), %d warm-up + %d "
                "timed calls per size\n# %10s %12s | %10s %10s %10s | %10s %10s %10s | %s\n",
                backend.c_str(), device.str().c_str(), n, kWarmup, iters, "bytes", "elements",
                "time(us)", "algbw", "busbw", "mpi(us)", "algbw", "busbw", "check");
  }
  bool all_ok = true;
  for (std::int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const std::int64_t count = bytes / 4;
    at::Tensor tensor = at::zeros({count}, at::TensorOptions().dtype(at::kFloat).device(device));
    const double seconds = mean_over_ranks(*bootstrap, time_allreduce(*comm, tensor, iters));
    std::vector<float> host(static_cast<size_t>(count), 0.0f);
    const double mpi_seconds = mean_over_ranks(*bootstrap, time_mpi_reference(*bootstrap, host, iters));
    const bool ok = bootstrap->all_true(check_allreduce(*comm, tensor));
    all_ok = all_ok && ok;
    const double algbw = bytes / seconds / 1e9;
    const double mpi_algbw = bytes / mpi_seconds / 1e9;
    if (bootstrap->world_rank() == 0) {
      std::printf("  %10lld %12lld | %10.1f %10.2f %10.2f | %10.1f %10.2f %10.2f | %s\n",
                  static_cast<long long>(bytes), static_cast<long long>(count), seconds * 1e6,
                  algbw, algbw * bus_factor, mpi_seconds * 1e6, mpi_algbw, mpi_algbw * bus_factor,
                  ok ? "OK" : "WRONG");
      std::fflush(stdout);
    }
  }
  if (bootstrap->world_rank() == 0) std::printf("# algbw and busbw in GB/s (1e9 bytes per second)\n");
  if (!all_ok) throw CommError("bench comm: an allreduce gave a wrong sum (see the check column)");
  log::shutdown();
  return 0;
}

}  // namespace hpctrain::cli
