// `hpctrain bench comm`: allreduce through hpctrain's communicator, size by size, next to a plain
// MPI_Allreduce of the same bytes on the host, with nccl-tests' bandwidth definitions.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include "bench.h"
#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/units.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/runtime/device.h"
#include "hpctrain/runtime/preflight.h"

namespace hpctrain::cli {
namespace {

const char* const kCommUsage =
    "usage: [mpirun -np N] hpctrain bench comm [--backend mpi|nccl] [--min-bytes 4KiB]\n"
    "                                          [--max-bytes 256MiB] [--iters 20] [--rounds 3]\n"
    "                                          [--check-collectives true|false]\n\n"
    "Allreduce (sum, float32) of every size from --min-bytes to --max-bytes, times 4 each step,\n"
    "through the mpi or nccl communicator (nccl: each rank on the GPU of its node-local rank) in\n"
    "two ways: allreduce_blocking() (what the trainer uses when it waits at once; mpi: on the\n"
    "calling thread) and allreduce() waited for (mpi: on the communicator's worker thread; nccl:\n"
    "queued back to back, then waited for); and a blocking MPI_Allreduce of the same bytes in\n"
    "host memory as the reference. One untimed round of --iters calls of each, then --rounds\n"
    "rounds of --iters timed calls of each in turn, so that the machine's drift touches all\n"
    "three alike; time is the median over rounds of the mean per call, of the slowest rank, and\n"
    "the last columns give each way's min-max over rounds. As in\n"
    "nccl-tests, algbw = bytes / time and busbw = algbw * 2(n-1)/n. The check allreduces rank+1\n"
    "from every rank and compares each element with n(n+1)/2. --check-collectives acts as\n"
    "dist.check_collectives does (default true: the mpi communicator's collectives each cost one\n"
    "small allreduce more; false times the transport alone).\n";

// One way to allreduce the bench's buffer: `iters` calls of it.
using Way = std::function<void(int iters)>;

Way blocking_way(comm::Communicator& comm, at::Tensor& tensor) {
  return [&comm, &tensor](int iters) {
    for (int i = 0; i < iters; ++i) comm.allreduce_blocking(tensor, comm::ReduceOp::kSum);
  };
}

Way waited_way(comm::Communicator& comm, at::Tensor& tensor) {
  if (comm.backend() != "nccl") {
    return [&comm, &tensor](int iters) {
      for (int i = 0; i < iters; ++i) comm.allreduce(tensor, comm::ReduceOp::kSum)->wait();
    };
  }
  // NCCL orders calls on its stream, so they can be queued; MPI calls on one buffer may not overlap.
  return [&comm, &tensor](int iters) {
    std::vector<std::unique_ptr<comm::Work>> pending;
    for (int i = 0; i < iters; ++i) pending.push_back(comm.allreduce(tensor, comm::ReduceOp::kSum));
    for (auto& work : pending) work->wait();
  };
}

// `host`: a float tensor in host memory.
Way mpi_way(const comm::Bootstrap& bootstrap, at::Tensor& host) {
  return [&bootstrap, &host](int iters) {
    for (int i = 0; i < iters; ++i) bootstrap.allreduce_sum(host.data_ptr<float>(), host.numel());
  };
}

// True when allreducing rank+1 gives n(n+1)/2 in every element.
bool check_allreduce(comm::Communicator& comm, at::Tensor& tensor) {
  const int n = comm.size();
  tensor.fill_(static_cast<float>(comm.rank() + 1));
  comm.allreduce(tensor, comm::ReduceOp::kSum)->wait();
  return tensor.eq(static_cast<float>(n * (n + 1) / 2)).all().item<bool>();
}

// Microseconds per call: `round_seconds` of `iters` calls each, the slowest rank's.
Spread per_call_us(const comm::Bootstrap& bootstrap, std::vector<double> round_seconds, int iters) {
  for (double& s : round_seconds) s *= 1e6 / iters;
  return slowest_spread(bootstrap, round_seconds);
}

std::string range(const Spread& us) {
  char text[48];
  std::snprintf(text, sizeof text, "%.1f-%.1f", us.min, us.max);
  return text;
}

}  // namespace

const char* bench_comm_usage() { return kCommUsage; }

int bench_comm(const config::ParsedArgs& parsed) {
  const std::string backend_name = parsed.has("backend") ? parsed.flags.at("backend") : "mpi";
  config::Backend backend = config::Backend::kMpi;
  if (!config::parse_choice(backend_name, backend)) {
    throw ConfigError("bench comm: --backend must be one of " + config::choice_list<config::Backend>() + ", got '" +
                      backend_name + "'");
  }
  const auto flag_bytes = [&](const char* name, const char* fallback) {
    return parse_bytes(parsed.has(name) ? parsed.flags.at(name) : fallback,
                       std::string("bench comm --") + name);
  };
  const std::int64_t min_bytes = flag_bytes("min-bytes", "4KiB");
  const std::int64_t max_bytes = flag_bytes("max-bytes", "256MiB");
  const auto iters = static_cast<int>(int_flag(parsed, "bench comm", "iters", "20"));
  const auto rounds = static_cast<int>(int_flag(parsed, "bench comm", "rounds", "3"));
  if (min_bytes < 4 || max_bytes < min_bytes || iters < 1 || rounds < 1) {
    throw ConfigError("bench comm: need 4 <= --min-bytes <= --max-bytes, --iters >= 1 and --rounds >= 1");
  }
  const bool cuda = backend == config::Backend::kNccl;
  comm::validate_backend(backend, cuda);  // before MPI: the same answer on every rank
  if (cuda && runtime::visible_gpus() == 0) {
    throw ConfigError("bench comm --backend nccl: libtorch sees no GPU (CPU-only libtorch, no GPU, "
                      "or CUDA_VISIBLE_DEVICES hides them); use --backend mpi");
  }

  const std::string checked = parsed.has("check-collectives") ? parsed.flags.at("check-collectives") : "true";
  if (checked != "true" && checked != "false") {
    throw ConfigError("bench comm: --check-collectives must be true or false, got '" + checked + "'");
  }
  const Ranks ranks = start_ranks(bench_start(cuda, backend, checked == "true"));
  const auto& bootstrap = ranks.bootstrap;
  const c10::Device device = ranks.device;
  const auto& comm = ranks.comm;
  const int n = comm->size();
  const double bus_factor = 2.0 * (n - 1) / n;

  if (bootstrap->world_rank() == 0) {
    std::printf("# bench comm: allreduce sum float32, backend %s on %s, %d rank(s)%s, 1 untimed + %d timed rounds of "
                "%d calls per size and way, in turn\n"
                "# %10s %12s | %10s %10s %10s | %10s %10s | %10s %10s %10s | %5s | %s\n",
                backend_name.c_str(), device.str().c_str(), n,
                backend == config::Backend::kMpi && checked == "false" ? " (collectives unchecked)" : "", rounds,
                iters, "bytes", "elements", "block(us)", "algbw", "busbw", "wait(us)", "busbw", "mpi(us)", "algbw",
                "busbw", "check", "min-max us: block, wait, mpi");
  }
  bool all_ok = true;
  for (std::int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const std::int64_t count = bytes / 4;
    at::Tensor tensor = at::zeros({count}, at::TensorOptions().dtype(at::kFloat).device(device));
    // The reference reduces the very same memory on a CPU: two buffers of hundreds of MiB can
    // differ by 10 % in speed here (their pages), which would be charged to the communicator.
    at::Tensor host = tensor.is_cpu() ? tensor : at::zeros({count}, at::kFloat);
    const Way block = blocking_way(*comm, tensor);
    const Way wait = waited_way(*comm, tensor);
    const Way mpi = mpi_way(*bootstrap, host);
    const auto seconds = time_in_turn({{"block", [&] { block(iters); }},
                                       {"wait", [&] { wait(iters); }},
                                       {"mpi", [&] { mpi(iters); }}},
                                      {1, rounds, device});
    const Spread block_us = per_call_us(*bootstrap, seconds[0], iters);
    const Spread wait_us = per_call_us(*bootstrap, seconds[1], iters);
    const Spread mpi_us = per_call_us(*bootstrap, seconds[2], iters);
    const bool ok = bootstrap->all_true(check_allreduce(*comm, tensor));
    all_ok = all_ok && ok;
    const auto gbps = [&](double us) { return bytes / us / 1e3; };
    if (bootstrap->world_rank() == 0) {
      std::printf("  %10lld %12lld | %10.1f %10.2f %10.2f | %10.1f %10.2f | %10.1f %10.2f %10.2f | %5s | %s %s %s\n",
                  static_cast<long long>(bytes), static_cast<long long>(count), block_us.median, gbps(block_us.median),
                  gbps(block_us.median) * bus_factor, wait_us.median, gbps(wait_us.median) * bus_factor, mpi_us.median,
                  gbps(mpi_us.median), gbps(mpi_us.median) * bus_factor, ok ? "OK" : "WRONG", range(block_us).c_str(),
                  range(wait_us).c_str(), range(mpi_us).c_str());
      std::fflush(stdout);
    }
  }
  if (bootstrap->world_rank() == 0) std::printf("# algbw and busbw in GB/s (1e9 bytes per second)\n");
  if (!all_ok) throw CommError("bench comm: an allreduce gave a wrong sum (see the check column)");
  log::shutdown();
  return 0;
}

}  // namespace hpctrain::cli
