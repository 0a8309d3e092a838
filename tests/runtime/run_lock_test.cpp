#include "hpctrain/runtime/run_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"

namespace hpctrain::runtime {
namespace {

namespace fs = std::filesystem;

class RunLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("hpctrain_run_lock_" + std::to_string(::getpid()))).string();
    hpctrain::sys::remove_tree(dir_);
  }
  void TearDown() override { hpctrain::sys::remove_tree(dir_); }

  // Fast beats, so a live holder shows within a tenth of a second.
  static RunLockOptions fast(const std::string& host = "", const std::string& slurm_job = "") {
    RunLockOptions options;
    options.beat_s = 0.05;
    options.stale_s = 1;
    options.host = host;
    options.slurm_job = slurm_job;
    return options;
  }

  // A lock file as a holder that never beats would leave it.
  void leave_lock(const std::string& host, std::int64_t pid, const std::string& slurm_job) const {
    fs::create_directories(dir_);
    std::ofstream(dir_ + "/lock") << "{\"host\":\"" << host << "\",\"pid\":" << pid << ",\"slurm_job\":\""
                                  << slurm_job << "\",\"started\":\"2026-01-01T00:00:00Z\",\"token\":\"old\","
                                  << "\"beat\":\"000000000003\"}\n";
  }

  static double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  std::string dir_;
};

TEST_F(RunLockTest, ASecondJobIsRefusedNamingTheHolderAndTheLockGoesWithTheFirst) {
  auto first = RunLock::acquire(dir_, fast("node-a", "101"));
  ASSERT_TRUE(fs::exists(dir_ + "/lock"));
  const auto start = std::chrono::steady_clock::now();
  try {
    RunLock::acquire(dir_, fast("node-b", "202"));
    FAIL() << "a second job took a live lock";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    const std::string message = e.what();
    EXPECT_NE(message.find("run.dir=" + dir_ + " is in use by another job: host node-a, process " +
                           std::to_string(::getpid()) + ", Slurm job 101, started 20"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("another run.dir"), std::string::npos) << message;
  }
  EXPECT_LT(seconds_since(start), 0.9) << "a live heartbeat is seen within a beat, not after run.lock_stale_s";
  first.reset();
  EXPECT_FALSE(fs::exists(dir_ + "/lock"));
  EXPECT_NO_THROW(RunLock::acquire(dir_, fast("node-b")));
}

TEST_F(RunLockTest, ALockWithoutAHeartbeatOnAnotherHostIsTakenAfterTheStaleTime) {
  leave_lock("elsewhere", 12345, "");
  const auto start = std::chrono::steady_clock::now();
  auto lock = RunLock::acquire(dir_, fast("here"));
  EXPECT_GE(seconds_since(start), 1.0);
  std::ifstream in(dir_ + "/lock");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"host\":\"here\""), std::string::npos) << text;
}

TEST_F(RunLockTest, TheLockOfAnEndedProcessOnThisHostIsTakenAtOnce) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  leave_lock(hpctrain::sys::host_name(), child, "");
  const auto start = std::chrono::steady_clock::now();
  auto lock = RunLock::acquire(dir_, fast());
  EXPECT_LT(seconds_since(start), 0.5);
}

// A requeued Slurm job (or one relaunched after a failure) keeps its job id: not refused.
TEST_F(RunLockTest, TheSameSlurmJobTakesItsOwnLockAtOnce) {
  leave_lock("node-a", 1, "777");
  const auto start = std::chrono::steady_clock::now();
  auto lock = RunLock::acquire(dir_, fast("node-b", "777"));
  EXPECT_LT(seconds_since(start), 0.5);
}

TEST_F(RunLockTest, AJobWhoseLockWasTakenIsToldAndLeavesTheOtherLockAlone) {
  std::atomic<bool> lost{false};
  RunLockOptions options = fast("node-a");
  options.on_lost = [&](const std::string& what) {
    EXPECT_NE(what.find("was taken by host node-b"), std::string::npos) << what;
    lost = true;
  };
  auto first = RunLock::acquire(dir_, options);
  fs::remove(dir_ + "/lock");  // as a job that judged it dead would have moved it aside
  auto second = RunLock::acquire(dir_, fast("node-b"));
  for (int i = 0; i < 100 && !lost; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(lost);
  first.reset();
  EXPECT_TRUE(fs::exists(dir_ + "/lock")) << "the first job removed the second's lock";
}

}  // namespace
}  // namespace hpctrain::runtime
