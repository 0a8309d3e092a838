#include "hpctrain/runtime/preflight.h"

#include <torch/version.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/version.h"
#include "hpctrain/runtime/global_batch.h"

namespace hpctrain::runtime {
namespace {

constexpr char kSeparator = '\x1f';  // never in host names, versions or hashes

std::string fnv1a_hex(const std::string& text) {
  std::uint64_t hash = 1469598103934665603ULL;
  for (const unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  std::ostringstream out;
  out << std::hex << hash;
  return out.str();
}

std::string encode(const RankFacts& f) {
  std::string out;
  for (const std::string& field :
       {std::to_string(f.rank), f.host, std::to_string(f.local_rank),
        std::to_string(f.local_size), f.device, f.gpu, f.version, f.config_hash}) {
    out += field;
    out += kSeparator;
  }
  return out;
}

RankFacts decode(const std::string& text) {
  std::vector<std::string> fields;
  std::string field;
  for (const char c : text) {
    if (c == kSeparator) {
      fields.push_back(field);
      field.clear();
    } else {
      field += c;
    }
  }
  HT_CHECK(fields.size() == 8, "rank facts with " + std::to_string(fields.size()) + " fields");
  RankFacts f;
  f.rank = std::stoi(fields[0]);
  f.host = fields[1];
  f.local_rank = std::stoi(fields[2]);
  f.local_size = std::stoi(fields[3]);
  f.device = fields[4];
  f.gpu = fields[5];
  f.version = fields[6];
  f.config_hash = fields[7];
  return f;
}

// "rank 3 (node7)"
std::string who(const RankFacts& f) { return "rank " + std::to_string(f.rank) + " (" + f.host + ")"; }

// Comma-separated CUDA_VISIBLE_DEVICES entries; the physical GPU behind device index `index`.
std::string physical_gpu(const std::string& visible_devices, int index) {
  if (visible_devices.empty()) return std::to_string(index);
  std::vector<std::string> entries;
  std::stringstream in(visible_devices);
  for (std::string entry; std::getline(in, entry, ',');) entries.push_back(entry);
  if (index < static_cast<int>(entries.size())) return entries[static_cast<size_t>(index)];
  return std::to_string(index);
}

}  // namespace

RankFacts local_facts(const comm::Topology& topology, const c10::Device& device, const std::string& config_text,
                      const std::string& bus_id, const std::string& visible_devices) {
  RankFacts f;
  f.rank = topology.world_rank;
  f.host = topology.hosts.at(static_cast<size_t>(topology.world_rank));
  f.local_rank = topology.local_rank;
  f.local_size = topology.local_size;
  f.device = device.str();
  if (device.is_cuda()) f.gpu = bus_id.empty() ? physical_gpu(visible_devices, device.index()) : bus_id;
  f.version = std::string("hpctrain ") + version() + ", libtorch " + TORCH_VERSION;
  f.config_hash = fnv1a_hex(config_text);
  return f;
}

std::vector<RankFacts> gather_facts(const comm::Bootstrap& bootstrap, const RankFacts& mine) {
  std::vector<RankFacts> facts;
  for (const std::string& text : bootstrap.allgather_string(encode(mine))) facts.push_back(decode(text));
  return facts;
}

std::vector<RankFacts> gather_job_facts(const comm::Bootstrap& bootstrap, const c10::Device& device,
                                        const config::Config& config) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string bus_id = device.is_cuda() ? comm::gpu_bus_id(device.index()) : "";
  // A TorchScript model is the file's contents as much as the config: the same path may hold another
  // export on another node.
  std::string model_identity = config::to_ini(config);
  if (config.model.name == config::ModelName::kTorchscript && !config.model.path.empty()) {
    std::ifstream in(config.model.path, std::ios::binary);
    model_identity += "\nmodel.path contents " + fnv1a_hex(std::string(std::istreambuf_iterator<char>(in), {}));
  }
  return gather_facts(bootstrap, local_facts(bootstrap.topology(), device, model_identity, bus_id,
                                             visible != nullptr ? visible : ""));
}

std::vector<std::string> world_problems(const std::vector<RankFacts>& facts) {
  std::vector<std::string> problems;
  if (facts.empty()) return problems;
  const RankFacts& root = facts.front();
  for (const RankFacts& f : facts) {
    if (f.version != root.version) {
      problems.push_back(who(f) + " runs " + f.version + ", rank 0 runs " + root.version +
                         ": install the same build on every node");
    }
    if (f.config_hash != root.config_hash) {
      problems.push_back(who(f) + " resolved a different config than rank 0 (hash " + f.config_hash + " vs " +
                         root.config_hash + "): give every rank the same config file and overrides, "
                         "and check that the file (and model.path's, for a TorchScript model) is the same on every node");
    }
  }
  return problems;
}

std::vector<std::string> device_problems(const std::vector<RankFacts>& facts, bool allow_shared_gpu) {
  std::vector<std::string> problems;
  if (facts.empty()) return problems;
  const bool root_cuda = !facts.front().gpu.empty();
  std::map<std::pair<std::string, std::string>, const RankFacts*> owner;  // (host, gpu) -> first rank
  for (const RankFacts& f : facts) {
    if (f.gpu.empty() != !root_cuda) {
      problems.push_back(who(f) + " computes on " + f.device + ", rank 0 on " + facts.front().device +
                         ": every rank needs a GPU, or set --dist.device=cpu");
      continue;
    }
    if (f.gpu.empty() || allow_shared_gpu) continue;
    const auto [it, first] = owner.emplace(std::make_pair(f.host, f.gpu), &f);
    if (!first) {
      problems.push_back(who(f) + " and rank " + std::to_string(it->second->rank) + " share GPU " + f.gpu +
                         ": start at most one rank per GPU (check CUDA_VISIBLE_DEVICES and "
                         "--ntasks-per-node), or set --dist.allow_shared_gpu=true");
    }
  }
  return problems;
}

void fail_together(const comm::Bootstrap& bootstrap, const std::vector<std::string>& problems,
                   const std::string& prefix) {
  if (problems.empty()) return;
  if (bootstrap.world_rank() != 0) bootstrap.barrier();  // never completes: rank 0 ends the job
  std::string message = prefix;
  for (size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
  throw ConfigError(message);
}

void check_devices(const comm::Bootstrap& bootstrap, const c10::Device& device, bool allow_shared_gpu) {
  config::Config config;
  config.dist.allow_shared_gpu = allow_shared_gpu;
  fail_together(bootstrap, device_problems(gather_job_facts(bootstrap, device, config), allow_shared_gpu), "");
}

void preflight(const comm::Bootstrap& bootstrap, const c10::Device& device, const config::Config& config) {
  const std::vector<RankFacts> facts = gather_job_facts(bootstrap, device, config);
  std::vector<std::string> problems = world_problems(facts);
  for (std::string& p : device_problems(facts, config.dist.allow_shared_gpu)) problems.push_back(std::move(p));
  try {
    accumulation_steps(config.train, bootstrap.world_size());
  } catch (const ConfigError& e) {
    problems.emplace_back(e.what());
  }
  fail_together(bootstrap, problems, problems.size() == 1 && problems[0].rfind("train.", 0) == 0 ? "" : "preflight: ");
}

}  // namespace hpctrain::runtime
