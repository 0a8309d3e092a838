// A rank that dies, freezes or hangs ends the whole job within dist.timeout_s, with a line naming
// it and what it was doing (Note [Rank watch] in src/comm/rank_watch.h), wherever the other ranks
// wait: in a gradient collective, in the control plane's barrier after a checkpoint, or behind a
// rank stuck in its loader or in a checkpoint write. Faults are injected with HPCTRAIN_FAULT
// (docs/reliability.md) or, for kill -9, from outside.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <regex>

#include "e2e.h"
#include "process.h"
#include "hpctrain/core/system.h"

namespace hpctrain::testing {
namespace {

namespace fs = std::filesystem;

constexpr double kTimeout = 3.0;  // dist.timeout_s of these runs

class RankFailureEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const FashionSuite suite = make_fashion_suite("rankfail", 600, 2);
    work_ = suite.work;
    data_ = suite.data;
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  static std::string train(const std::string& run, const std::string& extra, const std::string& model = "fashion_cnn",
                           int ranks = 2) {
    return mpirun(ranks) + kBin + " train --config " + kSource + "/configs/" + model + ".ini --data.path=" + data_ +
           " --run.dir=" + work_ + "/" + run + " --train.threads=1 --data.eval_split= --train.batch_size=16" +
           " --train.epochs=50 --log.every_steps=1 --dist.timeout_s=" + std::to_string(kTimeout) + " " + extra;
  }

  // Runs `command`, returning what it printed and how long after the injected fault fired it
  // ended (its "HPCTRAIN_FAULT=... fires ..., unix time T" line; a test fails without one). The
  // fault's time is the wall clock's, the only one shared with the ranks; a step of that clock
  // while the job runs (NTP on a VM) is bounded by the steady clock's time of the whole command.
  static ProcessResult timed(const std::string& command, double& seconds_after_fault) {
    const auto started = std::chrono::steady_clock::now();
    ProcessResult r = run_command(command);
    const double ended = unix_now();
    const double whole_command = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::smatch fired;
    EXPECT_TRUE(std::regex_search(r.err, fired, std::regex("HPCTRAIN_FAULT=\\S+ fires .*, unix time ([0-9.]+)")))
        << r.err;
    seconds_after_fault = fired.empty() ? 1e9 : std::min(ended - std::stod(fired[1].str()), whole_command);
    return r;
  }

  static double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }

  static std::string work_;
  static std::string data_;
};

std::string RankFailureEndToEnd::work_;
std::string RankFailureEndToEnd::data_;

// From the fault to the job's end: the timeout and 10 s for the watch's beat, the dumps and
// mpirun's ending of the other ranks. A job that hangs is killed by CTest's own timeout much later.
constexpr double kMostSeconds = kTimeout + 10.0;

// Rank 1 freezes (SIGSTOP) at the start of its first step; rank 0 waits in the first gradient
// allreduce. Rank 0 hears no heartbeat from rank 1 for dist.timeout_s (or its allreduce times out
// at about the same moment, naming the rank behind) and ends the job, naming rank 1 and its last
// report. A frozen rank's last report is its last heartbeat, up to dist.timeout_s/10 older than
// the freeze.
TEST_F(RankFailureEndToEnd, AFrozenRankIsNamedAndTheJobEnds) {
  double seconds = 0;
  const ProcessResult r = timed("env HPCTRAIN_FAULT=stop@1:step " + train("frozen", ""), seconds);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_LT(seconds, kMostSeconds) << r.err;
  const bool silent = r.err.find("rank 1 (" + sys::host_name() + ") has sent nothing for") != std::string::npos;
  const bool behind = r.err.find("did not complete within dist.timeout_s=3 s") != std::string::npos &&
                      r.err.find("rank 1 (" + sys::host_name() + ") was furthest behind") != std::string::npos;
  EXPECT_TRUE(silent || behind) << r.err;
  const auto exchange = r.err.find("furthest behind at the last exchange of reports, ");
  const bool at_step_0 =
      r.err.find("its last report: step 0, ") != std::string::npos ||
      (exchange != std::string::npos && r.err.find(" s ago: step 0, ", exchange) != std::string::npos);
  EXPECT_TRUE(at_step_0) << r.err;
}

// Rank 1 freezes as it begins its first checkpoint. Rank 0 goes on into the control plane's
// gathering of every rank's generator states, which has no timeout of its own (a checkpoint's
// waiting has none): only the heartbeats can end this job. No checkpoint is left under its final
// name.
TEST_F(RankFailureEndToEnd, ARankFrozenInACheckpointIsNamedByTheRankWaitingForIt) {
  double seconds = 0;
  const ProcessResult r = timed(
      "env HPCTRAIN_FAULT=stop@1:checkpoint-wait " + train("frozen-in-checkpoint", "--ckpt.every_steps=2", "mlp"),
      seconds);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_LT(seconds, kMostSeconds) << r.err;
  EXPECT_NE(r.err.find("[rank 0/2 " + sys::host_name() + "] rank 1 (" + sys::host_name() + ") has sent nothing for"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("(this rank: step 2, in a checkpoint, waiting for the other ranks for "), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(work_ + "/frozen-in-checkpoint/checkpoints/ckpt-2.h5"));
}

// Rank 0's own watch ended the job (exit 5, in time) over its stuck checkpoint write, saying at
// which step and under which limit ("step 2; dist.timeout_s=3").
void expect_stuck_write_ended_the_job(const ProcessResult& r, double seconds, const std::string& step_and_limit) {
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_LT(seconds, kMostSeconds) << r.err;
  EXPECT_NE(r.err.find("[rank 0/2 " + sys::host_name() + "] this rank has been writing a checkpoint for "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(" s (" + step_and_limit + "): the write is stuck"), std::string::npos) << r.err;
}

// Rank 0's training thread hangs as it begins writing its first checkpoint (as on a hung file
// system) while the process lives and beats on, so rank 1, waiting in the control plane's barrier
// after the write, hears nothing wrong. Rank 0's own watch ends the job after
// ckpt.write_timeout_s (0: dist.timeout_s), naming the write and the option.
TEST_F(RankFailureEndToEnd, ACheckpointWriteThatHangsEndsTheJob) {
  double seconds = 0;
  const ProcessResult r =
      timed("env HPCTRAIN_FAULT=hang@0:checkpoint " + train("stuck-write", "--ckpt.every_steps=2", "mlp"), seconds);
  expect_stuck_write_ended_the_job(r, seconds, "step 2; dist.timeout_s=3");
}

// The same with ckpt.async: the write hangs on rank 0's background thread while training goes
// on; at the next checkpoint rank 0 waits for it while rank 1 waits for rank 0 on the control
// plane, untimed, so ckpt.write_timeout_s (5 s) decides, not dist.timeout_s (3 s).
TEST_F(RankFailureEndToEnd, AnAsyncCheckpointWriteThatHangsEndsTheJob) {
  double seconds = 0;
  const ProcessResult r = timed("env HPCTRAIN_FAULT=hang@0:checkpoint-write " +
                                    train("stuck-async-write",
                                          "--ckpt.every_steps=2 --ckpt.async=true --ckpt.write_timeout_s=5", "mlp"),
                                seconds);
  expect_stuck_write_ended_the_job(r, seconds, "step 4; ckpt.write_timeout_s=5");
}

// Rank 1's training thread hangs waiting for its loader (as on a hung file system) while the
// process lives and beats on. Its own watch gives up after dist.timeout_s and names what it waits
// for; rank 0, waiting in the allreduce, may time out first and names rank 1 as the rank behind.
TEST_F(RankFailureEndToEnd, ARankStuckInItsLoaderEndsTheJob) {
  double seconds = 0;
  const ProcessResult r = timed("env HPCTRAIN_FAULT=hang@1:loader " + train("stuck-loader", ""), seconds);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_LT(seconds, kMostSeconds) << r.err;
  EXPECT_NE(r.err.find("waiting for the loader for"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
}

// Four ranks; rank 2's training thread hangs in its first step while its process lives and beats
// on, so no heartbeat falls silent: ranks 0, 1 and 3 wait in a collective until it times out, and
// each names rank 2, which had issued the fewest collectives at the last exchange of reports (not
// its own previous rank).
TEST_F(RankFailureEndToEnd, TheRankBehindIsNamedAmongFour) {
  double seconds = 0;
  const ProcessResult r = timed("env HPCTRAIN_FAULT=hang@2:step " + train("behind-of-four", "", "mlp", 4), seconds);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_LT(seconds, kMostSeconds) << r.err;
  const std::string named = "rank 2 (" + sys::host_name() + ") was furthest behind at the last exchange of reports";
  EXPECT_GE(count_lines_with(r.err, named), 1) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "furthest behind"), count_lines_with(r.err, named)) << r.err;
  EXPECT_NE(r.err.find(" s ago: step 0, in a training step for "), std::string::npos) << r.err;
}

// Rank 1's training thread hangs as it begins an evaluation while its process lives and beats
// on. Rank 0 evaluates its part and sums the results in a blocking allreduce on its own thread
// (Note [Blocking collectives] in src/comm/mpi_communicator.cpp), which cannot time out by itself:
// its watch ends the job after dist.timeout_s, naming rank 1 as the rank behind.
TEST_F(RankFailureEndToEnd, ABlockingCollectiveARankNeverJoinsEndsTheJob) {
  double seconds = 0;
  const ProcessResult r = timed("env HPCTRAIN_FAULT=hang@1:evaluation " +
                                    train("stuck-in-evaluation", "--data.eval_split=test --train.eval_every=2", "mlp"),
                                seconds);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_LT(seconds, kMostSeconds) << r.err;
  EXPECT_NE(r.err.find("[rank 0/2 " + sys::host_name() + "] this rank has been in a blocking collective for "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(" s (step 2; dist.timeout_s=3): a rank is missing from the collective (crashed, or stuck "
                       "before it); rank 1 (" +
                       sys::host_name() + ") was furthest behind at the last exchange of reports"),
            std::string::npos)
      << r.err;
}

// kill -9 of rank 1 mid-run, from outside: the launcher or the heartbeats end the job promptly.
TEST_F(RankFailureEndToEnd, AKilledRankEndsTheJob) {
  const std::string dir = work_ + "/killed";
  fs::create_directories(dir);
  const ProcessResult r = run_command(
      "(" + train("killed", "") + ") > " + dir + "/out.log 2>&1 & pid=$!; for i in $(seq 1 600); do [ -s " + dir +
      "/metrics.jsonl ] && break; sleep 0.1; done; for p in $(pgrep -f 'run.dir=" + dir +
      " '); do grep -qz '^OMPI_COMM_WORLD_RANK=1$' /proc/$p/environ && kill -9 $p && echo \"killed=$(date +%s.%N)\";"
      " done; wait $pid; echo \"exit=$?\"");
  const double ended = unix_now();
  const std::string log = read_file(dir + "/out.log");
  EXPECT_EQ(r.out.find("exit=0"), std::string::npos) << r.out << log;
  EXPECT_NE(r.out.find("exit="), std::string::npos) << r.out << log;
  std::smatch killed;
  ASSERT_TRUE(std::regex_search(r.out, killed, std::regex("killed=([0-9.]+)"))) << r.out << log;
  EXPECT_LT(ended - std::stod(killed[1].str()), 10.0) << log;
  // mpirun's notice, or the rank watch's line.
  const bool named = log.find("process rank 1 ") != std::string::npos || log.find("rank 1 (") != std::string::npos ||
                     log.find("rank 1 (" + sys::host_name() + ") was furthest behind") != std::string::npos;
  EXPECT_TRUE(named) << log;
}

}  // namespace
}  // namespace hpctrain::testing
