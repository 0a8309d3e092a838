#include "runtime.h"

#include <torch/version.h>

#include <cstdlib>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/version.h"
#include "hpctrain/io/h5_file.h"

namespace hpctrain::cli {

void init_early_logging(const config::LogConfig& log_config) {
  log::Identity who;
  who.world_rank = comm::Bootstrap::launcher_rank();
  who.host = sys::host_name();
  log::init_console(who, log_config.all_ranks, log::parse_level(log_config.level));
}

std::unique_ptr<comm::Bootstrap> start_mpi(const config::LogConfig& log_config) {
  auto bootstrap = std::make_unique<comm::Bootstrap>(nullptr, nullptr);
  log::Identity who;
  who.world_rank = bootstrap->world_rank();
  who.world_size = bootstrap->world_size();
  who.host = sys::host_name();
  log::init_console(who, log_config.all_ranks, log::parse_level(log_config.level));
  return bootstrap;
}

void log_banner(const comm::Bootstrap& bootstrap, int threads) {
  const comm::Topology& t = bootstrap.topology();
  const std::string nccl = comm::nccl_version();
  log::info("hpctrain {} | libtorch {} | {} | HDF5 {}{} | NCCL {}", version(), TORCH_VERSION,
            comm::Bootstrap::mpi_library_version(), io::hdf5_version(),
            io::hdf5_is_parallel() ? " parallel" : "", nccl.empty() ? "not built" : nccl);
  std::string hosts;
  for (size_t r = 0; r < t.hosts.size(); ++r) {
    if (r == 0 || t.hosts[r] != t.hosts[r - 1]) hosts += (hosts.empty() ? "" : ", ") + t.hosts[r];
  }
  log::info("world {} rank(s) on {} node(s) [{}], {} per node on rank 0's node; {} thread(s) per rank",
            t.world_size, t.node_count, hosts, t.local_size, threads);
  // Under Slurm: which job, and how many times it was requeued (a preempted job restarts with
  // SLURM_RESTART_COUNT=1, 2, ... and resumes from its run directory).
  if (const char* job = std::getenv("SLURM_JOB_ID")) {
    const char* restarts = std::getenv("SLURM_RESTART_COUNT");
    log::info("Slurm job {}, restart {}", job, restarts != nullptr ? restarts : "0");
  }
  log::debug("rank {} local rank {}/{} node {} host {} cores {}", t.world_rank, t.local_rank,
             t.local_size, t.node_rank, t.hosts[static_cast<size_t>(t.world_rank)],
             sys::affinity_cores());
}

bool wants_help(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") return true;
  }
  return false;
}

}  // namespace hpctrain::cli

namespace hpctrain::cli {

std::int64_t int_flag(const config::ParsedArgs& parsed, const std::string& command,
                      const std::string& name, const std::string& fallback) {
  const std::string text = parsed.has(name) ? parsed.flags.at(name) : fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < 0) {
    throw ConfigError(command + ": --" + name + " must be an integer >= 0, got '" + text + "'");
  }
  return value;
}

}  // namespace hpctrain::cli
