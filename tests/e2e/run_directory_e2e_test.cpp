// One run directory, one job (Note [Run directory lock] in src/runtime/run_lock.cpp), through the
// real executable: a second `hpctrain train` on a run directory in use is refused in one line
// naming the holder and writes nothing; a job stopped by a signal leaves no lock behind; a killed
// job's lock is taken over at once by the next start on its host. And a run directory on a file
// system too small for its checkpoints: a warning at the start, then a checkpoint write that fails
// with "no space left on device" and both sizes, the earlier checkpoint kept (Note [Out of space]).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "e2e.h"
#include "process.h"
#include "hpctrain/core/system.h"

namespace hpctrain::testing {
namespace {

namespace fs = std::filesystem;

class RunDirectoryEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const FashionSuite suite = make_fashion_suite("rundir", 1200, 1);
    work_ = suite.work;
    data_ = suite.data;
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  static std::string train(const std::string& run, const std::string& more = "") {
    return kBin + " train --config " + kSource + "/configs/fashion_cnn.ini --data.path=" + data_ + " --run.dir=" + run +
           " --train.threads=1 --train.batch_size=32 --data.eval_split= --log.every_steps=1 --log.tensorboard=false " +
           more;
  }

  // Starts `command` in the background (its pid in <run>.pid), waits for its first metrics record.
  static std::string started(const std::string& run, const std::string& command) {
    return command + " > " + run + ".out 2> " + run + ".err & echo $! > " + run + ".pid; " +
           "for i in $(seq 300); do grep -qs '\"step\"' " + run + "/metrics.jsonl && break; sleep 0.1; done; ";
  }

  static std::string work_;
  static std::string data_;
};

std::string RunDirectoryEndToEnd::work_;
std::string RunDirectoryEndToEnd::data_;

std::vector<std::int64_t> progress_steps(const std::string& metrics) {
  std::vector<std::int64_t> steps;
  for (const auto& record : read_jsonl(metrics)) {
    if (record.contains("step_ms") && record.contains("step")) steps.push_back(record["step"].get<std::int64_t>());
  }
  return steps;
}

TEST_F(RunDirectoryEndToEnd, ASecondJobOnARunDirectoryInUseIsRefusedAndWritesNothing) {
  const std::string run = work_ + "/shared";
  const std::string first = train(run, "--train.max_steps=100000 --train.epochs=1000");
  const ProcessResult second = run_command("(" + started(run, first) + train(run, "--train.max_steps=3") +
                                           "; status=$?; kill -USR1 $(cat " + run + ".pid); wait; exit $status)");
  EXPECT_EQ(second.exit_code, 2) << second.err;
  EXPECT_EQ(count_lines_with(second.err, "hpctrain: error:"), 1) << second.err;
  const std::regex holder("hpctrain: error: run.dir=" + run + " is in use by another job: host " + sys::host_name() +
                          ", process [0-9]+, started 20[0-9-]+T[0-9:]+Z \\(its lock " + run +
                          "/lock has a live heartbeat\\); wait for that job to end, or give this one another run.dir");
  EXPECT_TRUE(std::regex_search(second.err, holder)) << second.err;
  // The first job's log holds its start alone; it stopped on the signal and took its lock along.
  EXPECT_EQ(count_lines_with(read_file(run + "/logs/rank-0.log"), "run directory " + run), 1);
  EXPECT_FALSE(fs::exists(run + "/lock"));
  const std::vector<std::int64_t> before = progress_steps(run + "/metrics.jsonl");
  ASSERT_FALSE(before.empty());
  // Rerun: it resumes, and every step is recorded once.
  const ProcessResult resumed =
      run_command(train(run, "--train.epochs=1000 --train.max_steps=" + std::to_string(before.back() + 3)));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resumed from " + run + "/checkpoints/ckpt-" + std::to_string(before.back())),
            std::string::npos)
      << resumed.err;
  const std::vector<std::int64_t> steps = progress_steps(run + "/metrics.jsonl");
  EXPECT_EQ(std::set<std::int64_t>(steps.begin(), steps.end()).size(), steps.size());
  EXPECT_EQ(steps.back(), before.back() + 3);
}

TEST_F(RunDirectoryEndToEnd, TheLockOfAKilledJobIsTakenOverAtOnce) {
  const std::string run = work_ + "/killed";
  const ProcessResult r = run_command("(" + started(run, train(run, "--train.max_steps=100000 --train.epochs=1000")) +
                                      "kill -9 $(cat " + run + ".pid); wait; test -f " + run + "/lock || exit 9; " +
                                      "start=$(date +%s.%N); " + train(run, "--train.max_steps=2 --ckpt.resume=none") +
                                      "; status=$?; awk -v a=$start -v b=$(date +%s.%N) "
                                      "'BEGIN { print \"took \" b - a \" s\" }'; exit $status)");
  ASSERT_NE(r.exit_code, 9) << "the killed job left no lock to take over";
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("run.dir: taking over the lock " + run + "/lock of host " + sys::host_name()),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(": its process has ended"), std::string::npos) << r.err;
  std::smatch took;
  ASSERT_TRUE(std::regex_search(r.out, took, std::regex("took ([0-9.]+) s"))) << r.out;
  EXPECT_LT(std::stod(took[1]), 30) << "taken over after run.lock_stale_s, not at once";
  EXPECT_FALSE(fs::exists(run + "/lock"));
}

// A tmpfs that holds one checkpoint of fashion_cnn (5.1 MB with AdamW's moments) and not two.
TEST_F(RunDirectoryEndToEnd, ACheckpointThatDoesNotFitSaysNoSpaceAndKeepsTheLastOne) {
  const std::string small = work_ + "/small";
  fs::create_directories(small);
  const ProcessResult mounted = run_command("mount -t tmpfs -o size=8m tmpfs " + small);
  if (mounted.exit_code != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << mounted.err;
  }
  const std::string run = small + "/run";
  const ProcessResult r = run_command(train(run, "--train.max_steps=6 --ckpt.every_steps=2 --ckpt.keep_last=1"));
  const std::string checkpoints = run + "/checkpoints";
  std::vector<std::string> left;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoints, ec)) left.push_back(entry.path().filename().string());
  run_command("umount " + small);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("run.dir: " + checkpoints + " has "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("less than two checkpoints of about"), std::string::npos) << r.err;
  const std::regex full("hpctrain: error: writing checkpoint " + checkpoints + "/ckpt-[46].h5: no space left on "
                        "device: [0-9.]+ MB free on the file system of " + checkpoints + ", the checkpoint needs "
                        "about [0-9.]+ MB; free space there, lower ckpt.keep_last, or set run.dir on a larger "
                        "file system");
  EXPECT_TRUE(std::regex_search(r.err, full)) << r.err;
  for (const std::string& name : left) EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
  EXPECT_NE(std::find(left.begin(), left.end(), "latest"), left.end());
  EXPECT_EQ(std::count_if(left.begin(), left.end(), [](const std::string& n) { return n.rfind("ckpt-", 0) == 0; }), 1);
}

}  // namespace
}  // namespace hpctrain::testing
