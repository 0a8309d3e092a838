// The memory check (train/memory_check.h) through the real executable, run inside a memory cgroup
// of its own as a Slurm job with --mem is: a run whose activations, evaluation batch or data cache
// cannot fit what the cgroup leaves is refused in one line naming the option to lower, exit 2,
// before its run directory exists; the same run with that option lowered trains. Skipped where
// this process cannot make a cgroup (not root, or no memory controller).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "e2e.h"
#include "process.h"
#include "hpctrain/core/system.h"

namespace hpctrain::testing {
namespace {

namespace fs = std::filesystem;

// A child of this process's memory cgroup (v1 or v2) with a memory limit; removed when destroyed.
class MemoryCgroup {
 public:
  static std::unique_ptr<MemoryCgroup> make(std::int64_t limit_bytes, const std::string& tag) {
    std::ifstream groups("/proc/self/cgroup");
    for (std::string line; std::getline(groups, line);) {
      const size_t first = line.find(':');
      const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
      if (second == std::string::npos) continue;
      const std::string controllers = line.substr(first + 1, second - first - 1);
      const std::string path = line.substr(second + 1);
      const std::string name = "/hpctrain-memory-test-" + std::to_string(getpid()) + "-" + tag;
      if (controllers == "memory") {
        if (auto group = try_make("/sys/fs/cgroup/memory" + path + name, "memory.limit_in_bytes", limit_bytes)) {
          return group;
        }
      } else if (controllers.empty() && fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
        if (auto group = try_make("/sys/fs/cgroup" + path + name, "memory.max", limit_bytes)) return group;
      }
    }
    return nullptr;
  }

  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;
  ~MemoryCgroup() { rmdir(dir_.c_str()); }

  // `command` (no single quotes in it) run inside the cgroup.
  std::string wrap(const std::string& command) const {
    return "sh -c 'echo $$ > " + dir_ + "/cgroup.procs && exec " + command + "'";
  }

 private:
  explicit MemoryCgroup(std::string dir) : dir_(std::move(dir)) {}

  static std::unique_ptr<MemoryCgroup> try_make(const std::string& dir, const std::string& limit_file,
                                                std::int64_t limit_bytes) {
    std::error_code ec;
    if (!fs::create_directory(dir, ec)) return nullptr;
    std::unique_ptr<MemoryCgroup> group(new MemoryCgroup(dir));
    std::ofstream limit(dir + "/" + limit_file);
    limit << limit_bytes << std::flush;
    if (!limit) return nullptr;
    return group;
  }

  std::string dir_;
};

constexpr std::int64_t kLimit = std::int64_t{1} << 30;
// The data cache's case: 300,000 samples of 1,024 bytes (307 MB) in 256 MiB.
constexpr std::int64_t kSmallLimit = std::int64_t{256} << 20;
constexpr std::int64_t kCacheSamples = 300000;

class MemoryCheckEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const FashionSuite suite = make_fashion_suite("memory", 10000, 2);
    work_ = suite.work;
    data_ = suite.data;
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  void SetUp() override {
    cgroup_ = MemoryCgroup::make(kLimit, "1g");
    if (!cgroup_) GTEST_SKIP() << "cannot make a memory cgroup here (needs root and a memory controller)";
  }

  // `hpctrain train` of fashion_cnn, 1 rank, inside the cgroup, into a fresh run directory.
  ProcessResult train(const std::string& name, const std::string& options) {
    run_ = work_ + "/" + name;
    return run_command(cgroup_->wrap(kBin + " train --config " + kSource + "/configs/fashion_cnn.ini --data.path=" +
                                     data_ + " --run.dir=" + run_ + " --train.threads=1 --train.max_steps=2" +
                                     " --log.tensorboard=false " + options));
  }

  void expect_refused(const ProcessResult& r, const std::string& remedy) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(count_lines_with(r.err, "hpctrain: error:"), 1) << r.err;
    EXPECT_NE(r.err.find("more memory per rank"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(remedy), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(run_)) << "the refused run created " << run_;
  }

  static std::string work_;
  static std::string data_;
  std::unique_ptr<MemoryCgroup> cgroup_;
  std::string run_;
};

std::string MemoryCheckEndToEnd::work_;
std::string MemoryCheckEndToEnd::data_;

TEST_F(MemoryCheckEndToEnd, ActivationsOfABatchTooLargeAreRefusedAndASmallerBatchTrains) {
  expect_refused(train("activations", "--train.batch_size=10000 --data.eval_split="),
                 "the activations a forward keeps");
  const ProcessResult r = train("smaller", "--train.batch_size=64 --data.eval_split=");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A split larger than what the cgroup leaves, read into memory (data.io=posix) with a cache budget
// that would hold all of it; within a smaller budget the same run trains.
TEST_F(MemoryCheckEndToEnd, ADataCacheTooLargeIsRefusedAndASmallerOneTrains) {
  const std::string arrays = work_ + "/arrays";
  fs::create_directories(arrays);
  const ProcessResult made =
      run_command("python3 " + kSource + "/tests/support/write_npy.py " + arrays + " " + std::to_string(kCacheSamples) +
                  " 1024 && " + kBin + " prepare npy --source " + arrays + " --out " + work_ + "/large --test-fraction 0.01");
  ASSERT_EQ(made.exit_code, 0) << made.out << made.err;
  const std::string mlp = kBin + " train --config " + kSource + "/configs/mlp.ini --data.path=" + work_ +
                          "/large --train.threads=1 --train.max_steps=2 --log.tensorboard=false --data.io=posix" +
                          " --data.eval_split= --run.dir=";
  const std::unique_ptr<MemoryCgroup> small = MemoryCgroup::make(kSmallLimit, "256m");
  ASSERT_TRUE(small);
  run_ = work_ + "/cache";
  expect_refused(run_command(small->wrap(mlp + run_ + " --data.cache_mb=4096")), "lower data.cache_mb");
  const ProcessResult r = run_command(small->wrap(mlp + work_ + "/small-cache --data.cache_mb=32"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(MemoryCheckEndToEnd, AnEvaluationBatchTooLargeIsRefusedAndASmallerOneTrains) {
  expect_refused(train("evaluation", "--train.batch_size=64 --data.eval_split=test --train.eval_batch_size=10000"),
                 "lower train.eval_batch_size");
  const ProcessResult r = train("smaller", "--train.batch_size=64 --data.eval_split=test --train.eval_batch_size=256");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace hpctrain::testing
