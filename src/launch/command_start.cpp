#include "hpctrain/launch/command_start.h"

#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/config/option_table.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/activity.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/version.h"
#include "hpctrain/ddp/block_cache.h"
#include "hpctrain/io/h5_file.h"
#include "hpctrain/runtime/device.h"
#include "hpctrain/runtime/preflight.h"
#include "hpctrain/weights/lora_base.h"

namespace hpctrain::cli {

void tune_allocators() {
  sys::tune_allocator();
  ddp::install_block_cache();
}

void init_early_logging(const config::LogConfig& log_config) {
  log::Identity who;
  who.world_rank = comm::Bootstrap::launcher_rank();
  who.host = sys::host_name();
  log::init_console(who, log_config.all_ranks, log::parse_level(config::name_of(log_config.level)));
}

namespace {

// Note [Join watchdog]: a rank that never starts (it crashed or hangs on a file system before MPI,
// or was never launched) leaves the others waiting in MPI_Init or the first collective, neither
// of which has a timeout. A thread gives start-up `seconds`; past that this rank says so and exits
// with the communication code, and the launcher ends the job instead of letting it hang.
class JoinWatchdog {
 public:
  explicit JoinWatchdog(double seconds)
      : thread_([this, seconds] {
          std::unique_lock<std::mutex> lock(mutex_);
          const auto limit = std::chrono::duration<double>(seconds);
          if (cv_.wait_for(lock, limit, [this] { return joined_; })) return;
          std::fprintf(stderr,
                       "hpctrain: error: [rank %d %s] not every rank joined within dist.timeout_s=%g s of "
                       "start-up: a rank crashed or hangs before MPI started (a file system, a node) or "
                       "was never launched; see the other ranks' output, or raise --dist.timeout_s\n",
                       comm::Bootstrap::launcher_rank(), sys::host_name().c_str(), seconds);
          std::fflush(stderr);
          std::_Exit(static_cast<int>(ExitCode::kComm));
        }) {}
  JoinWatchdog(const JoinWatchdog&) = delete;
  JoinWatchdog& operator=(const JoinWatchdog&) = delete;
  ~JoinWatchdog() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      joined_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool joined_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

// A world that is not the one the user launched: N singletons from a launcher of another MPI
// library would each train alone and write over one another's run directory. `whole_allocation`:
// the command should span the Slurm job's tasks (train, doctor), unlike a one-process eval.
void check_launch(int world_size, bool whole_allocation) {
  const int launched = comm::Bootstrap::launcher_world_size();
  if (launched > 0 && launched != world_size) {
    throw ConfigError("the launcher started " + std::to_string(launched) + " ranks, but MPI sees a world of " +
                      std::to_string(world_size) + ": hpctrain's MPI library (" +
                      comm::Bootstrap::mpi_library_version() + ") is not the launcher's; use that "
                      "library's mpirun, or srun with its plugin (srun --mpi=list; pmix for Open MPI)");
  }
  const char* tasks = std::getenv("SLURM_NTASKS");
  if (whole_allocation && launched == 0 && world_size == 1 && tasks != nullptr && std::atoi(tasks) > 1) {
    throw ConfigError("hpctrain runs as a single process, but this Slurm job has SLURM_NTASKS=" +
                      std::string(tasks) + " tasks: start it with srun (or mpirun) so that every task "
                      "becomes a rank, as slurm/train.sbatch does");
  }
}

}  // namespace

std::unique_ptr<comm::Bootstrap> start_mpi(const config::LogConfig& log_config, double timeout_s,
                                           bool whole_allocation) {
  std::unique_ptr<comm::Bootstrap> bootstrap;
  {
    const JoinWatchdog watchdog(timeout_s);
    bootstrap = std::make_unique<comm::Bootstrap>(nullptr, nullptr);
    bootstrap->barrier();  // every rank is here
  }
  log::Identity who;
  who.world_rank = bootstrap->world_rank();
  who.world_size = bootstrap->world_size();
  who.host = sys::host_name();
  log::init_console(who, log_config.all_ranks, log::parse_level(config::name_of(log_config.level)));
  check_launch(bootstrap->world_size(), whole_allocation);
  activity::set_rank(bootstrap->world_rank());
  bootstrap->watch_ranks(timeout_s);
  return bootstrap;
}

namespace {

std::string cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (const int cpu : cpus) out += (out.empty() ? "" : ",") + std::to_string(cpu);
  return out;
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::istringstream in(text);
  for (std::string cpu; std::getline(in, cpu, ',');) cpus.push_back(std::stoi(cpu));
  return cpus;
}

// Collective: this rank's intra-op threads, train.threads or its node's cores shared among the
// ranks that may run on them (Note [Threads per rank] in core/system.h), set in libtorch. Rank 0
// warns once when the ranks of a node run more threads than it has cores.
int share_cores(const comm::Bootstrap& bootstrap, std::int64_t threads_option) {
  const std::vector<std::string> lists = bootstrap.allgather_string(cpu_list(sys::affinity_cpus()));
  const std::vector<std::string>& hosts = bootstrap.topology().hosts;
  int mine = 1;
  bool warned = false;
  for (size_t first = 0; first < hosts.size(); ++first) {
    if (std::find(hosts.begin(), hosts.begin() + static_cast<std::ptrdiff_t>(first), hosts[first]) !=
        hosts.begin() + static_cast<std::ptrdiff_t>(first)) {
      continue;  // a node already counted
    }
    std::vector<size_t> ranks;
    std::vector<std::vector<int>> cpus;
    std::set<int> cores;
    for (size_t r = first; r < hosts.size(); ++r) {
      if (hosts[r] != hosts[first]) continue;
      ranks.push_back(r);
      cpus.push_back(parse_cpu_list(lists[r]));
      cores.insert(cpus.back().begin(), cpus.back().end());
    }
    const std::vector<int> threads = sys::threads_per_rank(cpus, static_cast<int>(threads_option));
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (static_cast<int>(ranks[i]) == bootstrap.world_rank()) mine = threads[i];
    }
    const int total = std::accumulate(threads.begin(), threads.end(), 0);
    if (total > static_cast<int>(cores.size()) && !warned) {
      log::warn("{} is oversubscribed: its {} rank(s) run {} intra-op thread(s) on {} core(s), which then take "
                "turns (slower than one thread per core); start fewer ranks there or lower train.threads",
                hosts[first], ranks.size(), total, cores.size());
      warned = true;
    }
  }
  at::set_num_threads(mine);
  return mine;
}

}  // namespace

Ranks start_ranks(const RankStart& start) {
  init_early_logging(start.log);
  Ranks ranks;
  ranks.bootstrap = start_mpi(start.log, start.timeout_s, start.whole_allocation);
  ranks.threads = share_cores(*ranks.bootstrap, start.threads);
  if (!start.bind_device) return ranks;
  const comm::Bootstrap& bootstrap = *ranks.bootstrap;
  ranks.device = runtime::device_for_rank(start.use_cuda, bootstrap.topology(), start.allow_shared_gpu);
  if (start.preflight != nullptr) {
    runtime::preflight(bootstrap, ranks.device, *start.preflight);
  } else {
    runtime::check_devices(bootstrap, ranks.device, start.allow_shared_gpu);
  }
  if (start.backend) {
    ranks.comm = comm::make_communicator(*start.backend, *ranks.bootstrap, start.use_cuda,
                                         ranks.device.is_cuda() ? ranks.device.index() : 0, start.timeout_s,
                                         start.check_collectives);
  }
  return ranks;
}

double default_timeout_s() {
  return std::stod(config::find_option("dist.timeout_s")->default_text.value());
}

RankStart config_start(const config::Config& config, bool use_cuda) {
  RankStart start;
  start.log = config.log;
  start.timeout_s = config.dist.timeout_s;
  start.use_cuda = use_cuda;
  start.allow_shared_gpu = config.dist.allow_shared_gpu;
  start.preflight = &config;
  start.backend = config.dist.backend;
  start.check_collectives = config.dist.check_collectives;
  start.threads = config.train.threads;
  return start;
}

RankStart bench_start(bool use_cuda, std::optional<config::Backend> backend, bool check_collectives) {
  RankStart start;
  start.check_collectives = check_collectives;
  start.log.level = config::LogLevel::kInfo;
  start.timeout_s = default_timeout_s();
  start.use_cuda = use_cuda;
  start.backend = backend;
  return start;
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

// The training config a checkpoint carries.
config::Config checkpoint_config(const ckpt::CheckpointReader& reader) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("hpctrain-checkpoint-" + std::to_string(::getpid()) + ".ini")).string();
  std::ofstream(path) << reader.meta().config_text;
  try {
    config::Config config = config::resolve(path, {}, /*require_complete=*/false);
    std::filesystem::remove(path);
    // A checkpoint's config is resolved, so auto means the key is absent: the file is older than
    // model.gpt_activation's auto, when a gpt's activation was gelu unless set.
    if (config.model.gpt_activation == config::GptActivation::kAuto) {
      config.model.gpt_activation = config::GptActivation::kGelu;
    }
    return config;
  } catch (...) {
    std::filesystem::remove(path);
    throw;
  }
}

std::shared_ptr<model::Model> checkpoint_model(const ckpt::CheckpointReader& reader, const config::Config& config,
                                               const model::ModelSpec& spec, weights::Weights which) {
  torch::manual_seed(static_cast<std::uint64_t>(config.train.seed));  // a LoRA base without init_from is the seed's
  std::shared_ptr<model::Model> model = model::make_model(config.model, spec);
  weights::read_checkpoint_weights(reader, *model, config.model, which);
  return model;
}

}  // namespace hpctrain::cli
