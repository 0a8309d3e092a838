// What the ranks of a job must agree on before they train, and the facts `hpctrain doctor`
// tabulates: each rank's host, node-local rank, device and the physical GPU behind it, its
// hpctrain and libtorch versions, and a hash of its resolved config. One allgather on the control
// plane collects them; the checks are pure functions over the collected facts, unit-tested
// without MPI. Depends on core, comm (Bootstrap) and c10's Device type.
#pragma once

#include <c10/core/Device.h>

#include <string>
#include <vector>

#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/config/config.h"

namespace hpctrain::runtime {

struct RankFacts {
  int rank = 0;
  std::string host;
  int local_rank = 0;
  int local_size = 1;
  std::string device;       // "cpu", "cuda:1"
  std::string gpu;          // the physical GPU: its PCI bus id, else CUDA_VISIBLE_DEVICES' entry; "" on CPU
  std::string version;      // "hpctrain 0.1.0, libtorch 1.13.0"
  std::string config_hash;  // of the resolved config's INI text
};

// This rank's facts. `bus_id`: the device's PCI bus id ("" when unknown); `visible_devices`: the
// value of CUDA_VISIBLE_DEVICES ("" when unset), the fallback that names the physical GPU.
RankFacts local_facts(const comm::Topology& topology, const c10::Device& device, const std::string& config_text,
                      const std::string& bus_id, const std::string& visible_devices);

// Collective: every rank's facts, indexed by world rank.
std::vector<RankFacts> gather_facts(const comm::Bootstrap& bootstrap, const RankFacts& mine);
// Collective: this process's facts (its device, the resolved config, the environment), gathered.
std::vector<RankFacts> gather_job_facts(const comm::Bootstrap& bootstrap, const c10::Device& device,
                                        const config::Config& config);

// Each returns one line per problem, naming the ranks (and hosts) and what to do; empty when all
// is well. world_problems: versions and configs that differ from rank 0's.
// device_problems: ranks on different kinds of device, and two ranks on one host bound to one
// GPU (unless `allow_shared_gpu`).
std::vector<std::string> world_problems(const std::vector<RankFacts>& facts);
std::vector<std::string> device_problems(const std::vector<RankFacts>& facts, bool allow_shared_gpu);

// `hpctrain train`'s preflight, collective, right after MPI starts and before anything is written:
// gathers the facts and runs both checks, and checks what depends on the world size
// (train.global_batch). On a problem rank 0 throws ConfigError with every line; the other ranks
// wait to be ended by its MPI_Abort, so the job stops within seconds with one message.
void preflight(const comm::Bootstrap& bootstrap, const c10::Device& device, const config::Config& config);

// Every rank found the same `problems` (none: nothing happens): rank 0 throws them, after
// `prefix`, as one ConfigError; the others wait in a barrier for its MPI_Abort, so the job prints
// one line.
void fail_together(const comm::Bootstrap& bootstrap, const std::vector<std::string>& problems,
                   const std::string& prefix);

// Collective, for commands without a preflight (bench): only the device check, same failure.
void check_devices(const comm::Bootstrap& bootstrap, const c10::Device& device, bool allow_shared_gpu);

}  // namespace hpctrain::runtime
