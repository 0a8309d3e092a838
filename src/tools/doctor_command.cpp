// `hpctrain doctor`: run under mpirun or srun like training, it shows where every rank landed and
// checks, one by one, what a training job needs from the cluster: one world, one GPU per rank,
// communicators that agree, bandwidth, a shared writable run directory, a readable dataset. Every
// check runs to the end on every rank and is reported; the exit code is that of the first failure.
#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/core/version.h"
#include "hpctrain/data/split.h"
#include "hpctrain/data/token_stream.h"
#include "hpctrain/io/h5_file.h"
#include "hpctrain/launch/commands.h"
#include "hpctrain/runtime/device.h"
#include "hpctrain/runtime/preflight.h"
#include "flight_report.h"
#include "hpctrain/launch/command_start.h"

namespace hpctrain::cli {
namespace {

namespace fs = std::filesystem;

const char* const kDoctorUsage =
    "usage: [mpirun -np N | srun] hpctrain doctor [--config FILE] [--section.key=value ...]\n"
    "                                            [--size-mb 64]\n"
    "       hpctrain doctor --flight RUN_DIR\n\n"
    "--flight: summarises the flight recorder's dumps in RUN_DIR/flight (dist.flight_records): each\n"
    "rank's last collective and why it dumped, and the first collective where the ranks disagree.\n\n"
    "Run it exactly as you would run `hpctrain train`. Rank 0 prints every rank's host, node-local\n"
    "rank and device, the versions of hpctrain and its libraries, and these checks:\n"
    "  world      every rank runs the same hpctrain and libtorch versions with the same config\n"
    "  devices    all ranks on one kind of device; no two ranks on a node on one physical GPU\n"
    "  allreduce  dist.backend's communicator (and, on GPUs, the MPI one) agree with MPI itself\n"
    "  bandwidth  --size-mb MiB allreduced through dist.backend's communicator (algbw, busbw)\n"
    "  run.dir    every rank can write run.dir and sees rank 0's files there (a shared file system)\n"
    "  data       every rank opens data.path and reads a sample of its splits (skipped without it)\n"
    "Each line is printed as soon as its check is decided. Exit 0 when none fails; otherwise the\n"
    "exit code of the first failed check's kind (2: world, devices, run.dir; 3: data). A\n"
    "communicator that fails or times out ends the job at once with exit 5 and its error, after\n"
    "the lines before it (docs/exit-codes.md).\n";

struct Check {
  std::string name;
  ExitCode code;  // the exit code when it fails
  enum class Result { kPass, kFail, kSkip } result = Result::kPass;
  std::string detail;
};

// Collective: true on every rank when `ok` holds on all of them. Otherwise `detail` gets each
// distinct failure once, after the ranks that hit it: "ranks 0, 1 (node1): ...".
bool agree(const comm::Bootstrap& bootstrap, bool ok, const std::string& failure, std::string& detail) {
  const std::vector<std::string> all = bootstrap.allgather_string(ok ? "" : failure);
  std::vector<std::pair<std::string, std::vector<size_t>>> failures;  // text -> ranks, first seen first
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    auto same = std::find_if(failures.begin(), failures.end(), [&](const auto& f) { return f.first == all[r]; });
    if (same == failures.end()) same = failures.insert(failures.end(), {all[r], {}});
    same->second.push_back(r);
  }
  if (failures.empty()) return true;
  std::string out;
  for (const auto& [text, ranks] : failures) {
    std::string who = ranks.size() == 1 ? "rank " : "ranks ";
    std::vector<std::string> hosts;
    for (const size_t r : ranks) {
      who += (r == ranks.front() ? "" : ", ") + std::to_string(r);
      const std::string& host = bootstrap.topology().hosts[r];
      if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    }
    std::string host_list;
    for (const auto& h : hosts) host_list += (host_list.empty() ? "" : ", ") + h;
    out += (out.empty() ? "" : "; ") + who + " (" + host_list + "): " + text;
  }
  detail = detail.empty() ? out : detail + "; " + out;
  return false;
}

void set(Check& check, bool passed, const std::string& pass_detail) {
  check.result = passed ? Check::Result::kPass : Check::Result::kFail;
  if (passed) check.detail = pass_detail;
}

std::string cuda_runtime_version() {
  try {
    const long v = at::detail::getCUDAHooks().versionCUDART();
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  } catch (const std::exception&) {
    return "none (CPU-only libtorch)";
  }
}

// Integer-valued floats, so every summation order gives the same exact sum.
at::Tensor test_pattern(int rank, std::int64_t count, const c10::Device& device) {
  return (at::arange(count, at::kFloat).remainder(7) + 1).mul(rank + 1).to(device);
}

// A communicator that fails or times out throws CommError here, which ends the job (exit 5)
// after the lines printed so far: continuing would call collectives some ranks never reach.
void check_allreduce(const comm::Bootstrap& bootstrap, const std::vector<comm::Communicator*>& comms,
                     const c10::Device& device, Check& check) {
  constexpr std::int64_t kCount = 1 << 18;
  at::Tensor expected = test_pattern(bootstrap.world_rank(), kCount, at::kCPU).contiguous();
  bootstrap.allreduce_sum(expected.data_ptr<float>(), kCount);  // MPI itself, on the host
  std::string failure;
  std::string names;
  for (comm::Communicator* c : comms) {
    names += (names.empty() ? "" : " and ") + c->backend();
    at::Tensor tensor = test_pattern(bootstrap.world_rank(), kCount, device);
    c->allreduce(tensor, comm::ReduceOp::kSum)->wait();
    if (!at::equal(tensor.cpu(), expected)) failure += c->backend() + " summed differently from MPI_Allreduce; ";
  }
  const bool passed = agree(bootstrap, failure.empty(),
                            failure + "try --dist.backend=mpi, or see docs/troubleshooting.md", check.detail);
  set(check, passed,
      names + (comms.size() == 1 ? " agrees" : " agree") + " with MPI_Allreduce (sum of " + std::to_string(kCount) +
          " floats over " + std::to_string(bootstrap.world_size()) + " ranks)");
}

void check_bandwidth(const comm::Bootstrap& bootstrap, comm::Communicator& comm, std::int64_t megabytes,
                     const c10::Device& device, Check& check) {
  constexpr int kIters = 5;
  const std::int64_t bytes = megabytes << 20;
  at::Tensor tensor = at::ones({bytes / 4}, at::TensorOptions().dtype(at::kFloat).device(device));
  comm.allreduce(tensor, comm::ReduceOp::kSum)->wait();  // warm-up: connections, buffers
  const Timer timer;
  for (int i = 0; i < kIters; ++i) comm.allreduce(tensor, comm::ReduceOp::kSum)->wait();
  double slowest = timer.elapsed_s() / kIters;  // the job runs at its slowest rank's pace
  for (const std::string& s : bootstrap.allgather_string(std::to_string(slowest * 1e6))) {
    slowest = std::max(slowest, std::stod(s) / 1e6);
  }
  const int n = bootstrap.world_size();
  const double algbw = static_cast<double>(bytes) / slowest / 1e9;
  char text[200];
  std::snprintf(text, sizeof(text), "%lld MiB over %s: %.2f ms, algbw %.2f GB/s, busbw %.2f GB/s",
                static_cast<long long>(megabytes), comm.backend().c_str(), slowest * 1e3, algbw,
                algbw * 2.0 * (n - 1) / n);
  set(check, true, text);
}

// Rank 0 creates run.dir/.hpctrain-doctor with a file; every rank must see it (checkpoints are read
// by every rank at resume) and write and read back a file of its own there.
void check_run_dir(const comm::Bootstrap& bootstrap, const std::string& run_dir, Check& check) {
  const fs::path probe_dir = fs::path(run_dir) / ".hpctrain-doctor";
  std::error_code ec;
  const bool created_run_dir = !fs::exists(run_dir, ec);
  std::string failure;
  if (bootstrap.world_rank() == 0) {
    fs::create_directories(probe_dir, ec);
    if (!ec) std::ofstream(probe_dir / "rank-0") << "written by rank 0\n";
    if (ec || !fs::exists(probe_dir / "rank-0", ec)) {
      failure = "cannot create " + probe_dir.string() + (ec ? ": " + ec.message() : "") +
                "; choose a run.dir every rank can write (--run.dir=...)";
    }
  }
  const bool root_wrote = bootstrap.all_true(failure.empty());
  if (root_wrote && bootstrap.world_rank() != 0) {
    if (!fs::exists(probe_dir / "rank-0", ec)) {
      failure = "does not see " + (probe_dir / "rank-0").string() + " written by rank 0: run.dir is not "
                "on a file system shared by all nodes, so a resume cannot read the checkpoints; put "
                "run.dir on the shared (parallel) file system";
    } else {
      const fs::path mine = probe_dir / ("rank-" + std::to_string(bootstrap.world_rank()));
      const std::string text = "written by rank " + std::to_string(bootstrap.world_rank()) + "\n";
      std::ofstream(mine) << text;
      std::ifstream in(mine);
      const std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (back != text) failure = "cannot write and read back " + mine.string() + ": check permissions and quota";
    }
  }
  const bool passed = agree(bootstrap, failure.empty(), failure, check.detail);
  bootstrap.barrier();
  if (bootstrap.world_rank() == 0) {
    try {
      sys::remove_tree(probe_dir.string());
      if (created_run_dir) fs::remove(run_dir, ec);  // empty again
    } catch (const Error&) {
      // The check's result stands; a probe left behind is harmless.
    }
  }
  set(check, passed, run_dir + ": every rank writes there and sees rank 0's files");
}

void check_data(const comm::Bootstrap& bootstrap, const config::Config& config, Check& check) {
  if (config.data.path.empty()) {
    check.result = Check::Result::kSkip;
    check.detail = "no data.path given";
    return;
  }
  std::string failure;
  std::string summary;
  for (const std::string& split : {config.data.train_split, config.data.eval_split}) {
    if (split.empty()) continue;
    try {
      if (data::is_token_stream(data::Manifest::load(config.data.path))) {
        const std::int64_t block = config.model.gpt_block_size;
        const data::TokenStream loaded = data::TokenStream::load(config.data.path, split, block, /*cache_bytes=*/0);
        if (loaded.size() < block + 1) throw DataError(split + " is shorter than one window of model.gpt_block_size + 1");
        (void)loaded.gather({0, loaded.size() - block - 1});
        summary += (summary.empty() ? "" : ", ") + split + " (" + std::to_string(loaded.size()) + " tokens)";
        continue;
      }
      const data::Split loaded =
          data::Split::load(config.data.path, split, /*cache_bytes=*/0, data::shard_access(config.data.io));
      (void)loaded.gather({0, loaded.size() - 1});
      summary += (summary.empty() ? "" : ", ") + split + " (" + std::to_string(loaded.size()) + " samples)";
    } catch (const Error& e) {
      failure += e.what();
      break;
    }
  }
  const bool passed = agree(bootstrap, failure.empty(), failure, check.detail);
  set(check, passed, config.data.path + ": " + summary + " read on every rank");
}

void print_header(const std::vector<runtime::RankFacts>& facts, const std::string& versions) {
  std::printf("%-6s %-24s %-8s %-8s %s\n", "rank", "host", "local", "device", "gpu");
  for (const auto& f : facts) {
    std::printf("%-6d %-24s %-8s %-8s %s\n", f.rank, f.host.c_str(),
                (std::to_string(f.local_rank) + "/" + std::to_string(f.local_size)).c_str(), f.device.c_str(),
                f.gpu.empty() ? "-" : f.gpu.c_str());
  }
  std::printf("\n%s\n\n%-10s %-6s %s\n", versions.c_str(), "check", "result", "detail");
  std::fflush(stdout);
}

// Each check's line as soon as it is decided, so a job that ends in a later check shows the earlier.
void print_check(const comm::Bootstrap& bootstrap, const Check& c) {
  if (bootstrap.world_rank() != 0) return;
  const char* result = c.result == Check::Result::kPass ? "PASS" : c.result == Check::Result::kFail ? "FAIL" : "SKIP";
  std::printf("%-10s %-6s %s\n", c.name.c_str(), result, c.detail.c_str());
  std::fflush(stdout);
}

}  // namespace

int run_doctor(const Args& args) {
  if (wants_help(args)) {
    std::cout << kDoctorUsage;
    return 0;
  }
  if (!args.empty() && args[0] == "--flight") {
    if (args.size() != 2) throw ConfigError("doctor --flight: give one RUN_DIR (hpctrain doctor --flight RUN_DIR)");
    report_flight(args[1], std::cout);
    return 0;
  }
  const std::vector<config::Flag> flags{{"size-mb", true, "MiB allreduced by the bandwidth check"}};
  const config::ParsedArgs parsed = config::parse_args(args, flags, true, /*require_complete=*/false);
  if (!parsed.positionals.empty()) {
    throw ConfigError("doctor: unexpected argument '" + parsed.positionals.front() + "' (see hpctrain doctor --help)");
  }
  const config::Config& config = parsed.config;
  const std::int64_t size_mb = int_flag(parsed, "doctor", "size-mb", "64");
  if (size_mb < 1) throw ConfigError("doctor: --size-mb must be at least 1");
  // A node without the GPU the config asks for is what doctor is for: it is reported by the
  // devices check, not raised here on that rank alone.
  bool use_cuda = false;
  std::string binding_failure;
  try {
    use_cuda = runtime::resolve_use_cuda(config.dist.device, runtime::visible_gpus());
    comm::validate_backend(config.dist.backend, use_cuda);
  } catch (const ConfigError& e) {
    binding_failure = e.what();
  }
  // Devices are bound below, where a rank that cannot bind one still reports.
  RankStart start = config_start(config, use_cuda);
  start.whole_allocation = true;
  start.bind_device = false;
  const Ranks ranks = start_ranks(start);
  comm::Bootstrap& b = *ranks.bootstrap;

  Check world{"world", ExitCode::kUsage, {}, {}};
  Check devices{"devices", ExitCode::kUsage, {}, {}};
  Check allreduce{"allreduce", ExitCode::kComm, {}, {}};
  Check bandwidth{"bandwidth", ExitCode::kComm, {}, {}};
  Check run_dir{"run.dir", ExitCode::kUsage, {}, {}};
  Check data{"data", ExitCode::kData, {}, {}};

  // Devices first: a rank whose binding fails still reports, as cpu, and says why.
  c10::Device device = at::kCPU;
  if (binding_failure.empty()) {
    try {
      device = runtime::device_for_rank(use_cuda, b.topology(), config.dist.allow_shared_gpu);
    } catch (const Error& e) {
      binding_failure = e.what();
    }
  }
  const std::vector<runtime::RankFacts> facts = runtime::gather_job_facts(b, device, config);
  const auto joined = [](const std::vector<std::string>& problems) {
    std::string out;
    for (const auto& p : problems) out += (out.empty() ? "" : "; ") + p;
    return out;
  };
  if (b.world_rank() == 0) {
    print_header(facts, std::string("hpctrain ") + version() + " | libtorch " + TORCH_VERSION + " | CUDA " +
                            cuda_runtime_version() + " | NCCL " +
                            (comm::nccl_version().empty() ? std::string("not built") : comm::nccl_version()) +
                            " | " + comm::Bootstrap::mpi_library_version() + " | HDF5 " + io::hdf5_version() +
                            (io::hdf5_is_parallel() ? " (parallel)" : " (serial)"));
  }
  world.detail = joined(runtime::world_problems(facts));
  set(world, world.detail.empty(),
      std::to_string(b.world_size()) + " rank(s) on " + std::to_string(b.topology().node_count) +
          " node(s), same versions and config");
  print_check(b, world);
  devices.detail = joined(runtime::device_problems(facts, config.dist.allow_shared_gpu));
  const bool bound = agree(b, binding_failure.empty(), binding_failure, devices.detail);
  set(devices, bound && devices.detail.empty(), use_cuda ? "one GPU per rank" : "cpu on every rank");
  print_check(b, devices);

  // Communicators only when the ranks agree on their devices: a mixed job could hang in NCCL's
  // set-up. The MPI communicator first: it behaves the same on every rank.
  if (world.result == Check::Result::kPass && devices.result == Check::Result::kPass) {
    const int index = device.is_cuda() ? device.index() : 0;
    const std::unique_ptr<comm::Communicator> mpi =
        comm::make_communicator(config::Backend::kMpi, b, use_cuda, index, config.dist.timeout_s);
    const std::unique_ptr<comm::Communicator> training =
        comm::make_communicator(config.dist.backend, b, use_cuda, index, config.dist.timeout_s);
    std::vector<comm::Communicator*> comms{training.get()};
    if (training->backend() != "mpi") comms.push_back(mpi.get());
    check_allreduce(b, comms, device, allreduce);
    print_check(b, allreduce);
    check_bandwidth(b, *training, size_mb, device, bandwidth);
    print_check(b, bandwidth);
  } else {
    allreduce.result = bandwidth.result = Check::Result::kSkip;
    allreduce.detail = bandwidth.detail = "not run: fix world and devices first";
    print_check(b, allreduce);
    print_check(b, bandwidth);
  }
  check_run_dir(b, config.run.dir, run_dir);
  print_check(b, run_dir);
  check_data(b, config, data);
  print_check(b, data);

  // Every rank holds the same verdicts, so every rank exits alike, without an abort.
  std::string failed;
  int code = 0;
  int passed = 0;
  int skipped = 0;
  for (const Check* c : {&world, &devices, &allreduce, &bandwidth, &run_dir, &data}) {
    if (c->result == Check::Result::kPass) ++passed;
    if (c->result == Check::Result::kSkip) ++skipped;
    if (c->result != Check::Result::kFail) continue;
    failed += (failed.empty() ? "" : ", ") + c->name;
    if (code == 0) code = static_cast<int>(c->code);
  }
  if (b.world_rank() == 0) {
    if (code == 0) {
      std::printf("\ndoctor: %d checks passed%s\n", passed,
                  skipped > 0 ? (", " + std::to_string(skipped) + " skipped").c_str() : "");
    } else {
      std::printf("\ndoctor: check(s) FAILED: %s\n", failed.c_str());
    }
    std::fflush(stdout);
    if (code != 0) {
      std::fprintf(stderr, "hpctrain: error: doctor: check(s) failed: %s; the table above says what to do\n",
                   failed.c_str());
    }
  }
  return code;
}

}  // namespace hpctrain::cli
