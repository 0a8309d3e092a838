// Start-up shared by the commands that run as MPI ranks (train, eval, doctor, bench): rank-aware
// logging, MPI, the rank's device, the preflight and the communicator, in that order, and the
// banner rank 0 prints. Shared by src/cli and src/tools.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/config/config.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/model/model.h"
#include "hpctrain/weights/lora_base.h"

namespace hpctrain::cli {

// How a command starts its ranks.
struct RankStart {
  config::LogConfig log;
  double timeout_s = 300;         // dist.timeout_s: joining, and the communicator's collectives
  bool whole_allocation = false;  // the command spans the Slurm job's tasks (train, doctor)
  bool bind_device = true;        // false: the command binds (and reports) devices itself (doctor)
  bool use_cuda = false;          // dist.device resolved
  bool allow_shared_gpu = false;
  // The full preflight (versions, config and GPUs agree: train, eval); null: only the device
  // check (bench).
  const config::Config* preflight = nullptr;
  std::optional<config::Backend> backend;  // the communicator to build, if any
  bool check_collectives = true;           // dist.check_collectives
  std::int64_t threads = 0;                // train.threads; 0: the node's cores shared among its ranks
};

// What the ranks start with.
struct Ranks {
  std::unique_ptr<comm::Bootstrap> bootstrap;
  c10::Device device = c10::Device(c10::kCPU);
  std::unique_ptr<comm::Communicator> comm;  // null when no backend was asked for
  int threads = 1;                           // this rank's intra-op threads, as set in libtorch
};

// Collective: logging (rank 0 talks), MPI with the join watchdog (start_mpi), intra-op threads
// (train.threads, or the node's cores shared among the ranks that may run on them), this rank's
// device, the preflight or the device check, and the communicator, as `start` asks. Throws ConfigError
// when the ranks disagree or a device cannot be bound (on rank 0, with every problem).
Ranks start_ranks(const RankStart& start);

// Memory allocation as training needs it: glibc's thresholds (sys::tune_allocator) and the cache
// of large CPU blocks (ddp::install_block_cache). Every command that runs a model calls it first.
void tune_allocators();

// Console logging before MPI starts: rank from the launcher's environment, so only rank 0 talks.
void init_early_logging(const config::LogConfig& log_config);

// Starts MPI, waits until every rank has joined, and re-initializes logging with the rank's
// identity. Collective. A rank that has not seen every rank join within `join_timeout_s` exits
// with code 5 (Note [Join watchdog]); a world that is not the launcher's is a ConfigError, and so
// is, for a command meant to span the job (`whole_allocation`), one process in a Slurm job of
// several tasks.
std::unique_ptr<comm::Bootstrap> start_mpi(const config::LogConfig& log_config, double join_timeout_s,
                                           bool whole_allocation = false);

// dist.timeout_s's default, for commands that take no config (bench).
double default_timeout_s();

// The start of a command that takes a config (train, eval, doctor): its logging, dist.timeout_s,
// GPU sharing, the full preflight and dist.backend's communicator; `use_cuda`: dist.device resolved.
RankStart config_start(const config::Config& config, bool use_cuda);

// A bench command's start: INFO logging, dist.timeout_s's default, no GPU shared between ranks
// (it would skew the figures), and `backend`'s communicator if given.
RankStart bench_start(bool use_cuda, std::optional<config::Backend> backend, bool check_collectives = true);

// Rank 0: versions, world/local sizes, nodes and hosts, threads. Every rank: its binding, in its log.
void log_banner(const comm::Bootstrap& bootstrap, int threads);

// True when `args` asks for help (-h or --help anywhere).
bool wants_help(const std::vector<std::string>& args);

// The integer >= 0 given as --`name`, or `fallback` (as text) when absent. Throws ConfigError
// naming `command` and the flag.
std::int64_t int_flag(const config::ParsedArgs& parsed, const std::string& command,
                      const std::string& name, const std::string& fallback);

// The training config a checkpoint carries.
config::Config checkpoint_config(const ckpt::CheckpointReader& reader);

// The model a checkpoint holds (generate, ckpt export --merge), built from its config `config`
// with the shapes of `spec`; a LoRA model's base rebuilt and checked first; `which` weights.
std::shared_ptr<model::Model> checkpoint_model(const ckpt::CheckpointReader& reader, const config::Config& config,
                                               const model::ModelSpec& spec, weights::Weights which);

}  // namespace hpctrain::cli
