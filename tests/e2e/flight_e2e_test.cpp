// The flight recorder through the real executable at -np 2 (Note [Flight recorder]): a rank that
// skips a collective, one that issues a different size and one that sleeps before a collective
// (HPCTRAIN_FAULT) each end the job with a message that names the rank and the collective, within
// dist.timeout_s + 10 s of the fault, with both ranks' dumps written; `hpctrain doctor --flight`
// says the same. The skip and the resize run with the default options (dist.check_collectives on:
// Note [Checked collectives]) ten times each, since unchecked they could end otherwise by luck;
// HPCTRAIN_FLIGHT_REPEATS=N repeats the sleep N times. SIGUSR2 makes every rank dump while the run
// goes on.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "e2e.h"
#include "process.h"
#include "hpctrain/core/system.h"

namespace hpctrain::testing {
namespace {

namespace fs = std::filesystem;

constexpr double kTimeoutS = 3;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int repeats() {
  const char* text = std::getenv("HPCTRAIN_FLIGHT_REPEATS");
  return text == nullptr ? 1 : std::max(1, std::atoi(text));
}

constexpr int kDesyncRepeats = 10;

class FlightRecorderEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const FashionSuite suite = make_fashion_suite("flight", 1200, 1);
    work_ = suite.work;
    data_ = suite.data;
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  static std::string train(const std::string& run, const std::string& environment) {
    return environment + " " + mpirun(2) + kBin + " train --config " + kSource + "/configs/fashion_cnn.ini" +
           " --data.path=" + data_ + " --run.dir=" + run + " --train.threads=1 --train.batch_size=32" +
           " --train.max_steps=15 --dist.bucket_mb=0.05 --data.eval_split= --log.tensorboard=false" +
           " --ckpt.save_final=false --dist.timeout_s=" + std::to_string(kTimeoutS);
  }

  // Runs with HPCTRAIN_FAULT=`fault` and checks the end: exit 5, `expected` (a regex) in the one
  // error line, within the timeout + 10 s of the fault, and the doctor saying the same.
  static void expect_named(const std::string& fault, const std::string& expected, int times) {
    for (int i = 0; i < times; ++i) {
      SCOPED_TRACE(fault + ", repetition " + std::to_string(i + 1));
      const std::string run = work_ + "/" + fault.substr(0, fault.find('@')) + "-" + std::to_string(i);
      const ProcessResult r = run_command(train(run, "HPCTRAIN_FAULT=" + fault));
      const double ended = unix_now();
      EXPECT_EQ(r.exit_code, 5) << r.err;
      std::smatch fired;
      ASSERT_TRUE(std::regex_search(r.err, fired, std::regex("fires at collective #[0-9]+, unix time ([0-9.]+)")))
          << r.err;
      EXPECT_LE(ended - std::stod(fired[1]), kTimeoutS + 10) << r.err;
      std::smatch error;
      ASSERT_TRUE(std::regex_search(r.err, error, std::regex("hpctrain: error: [^\n]*"))) << r.err;
      EXPECT_TRUE(std::regex_search(error.str(), std::regex(expected))) << r.err;
      EXPECT_NE(error.str().find("flight recorder: "), std::string::npos) << r.err;
      EXPECT_TRUE(fs::exists(run + "/flight/rank-0.json"));
      EXPECT_TRUE(fs::exists(run + "/flight/rank-1.json"));
      const ProcessResult doctor = run_command(kBin + " doctor --flight " + run);
      EXPECT_EQ(doctor.exit_code, 0) << doctor.err;
      EXPECT_TRUE(std::regex_search(doctor.out, std::regex(expected))) << doctor.out;
    }
  }

  static std::string work_;
  static std::string data_;
};

std::string FlightRecorderEndToEnd::work_;
std::string FlightRecorderEndToEnd::data_;

TEST_F(FlightRecorderEndToEnd, ARankThatSleepsBeforeACollectiveIsNamed) {
  expect_named("sleep@1:collective#60",
               "collective #[0-9]+ \\(allreduce of [0-9]+ bytes Float, bucket [0-9]\\): "
               "rank 1 never issued it .*rank 0 did",
               repeats());
}

// Unchecked, MPI would pair the skipper's later collectives with the others' unlike ones, which
// may overwrite memory before any rank sees an error (Note [Checked collectives]).
TEST_F(FlightRecorderEndToEnd, ARankThatSkipsACollectiveIsNamed) {
  expect_named("skip@1:collective#60",
               "rank 1 skipped collective #[0-9]+ \\(allreduce of [0-9]+ bytes Float, bucket [0-9]\\)", kDesyncRepeats);
}

TEST_F(FlightRecorderEndToEnd, ARankThatIssuesAnotherSizeIsNamed) {
  expect_named("resize@1:collective#60",
               "collective #[0-9]+ differs between ranks \\(a desync\\): rank [01] issued allreduce of [0-9]+ bytes "
               "Float, bucket [0-9]; rank [01] issued allreduce",
               kDesyncRepeats);
}

TEST_F(FlightRecorderEndToEnd, Sigusr2MakesEveryRankDumpWhileTheRunGoesOn) {
  const std::string run = work_ + "/usr2";
  // mpirun passes SIGUSR2 and SIGUSR1 on to the ranks; SIGUSR1 then stops the run (exit 75).
  const ProcessResult r = run_command("bash -c '" + train(run, "") + " --train.max_steps=100000 --train.epochs=1000 & pid=$!; " +
                                      "for i in $(seq 100); do [ -f " + run + "/metrics.jsonl ] && break; sleep 0.1; "
                                      "done; sleep 1; kill -USR2 $pid; sleep 2; kill -USR1 $pid; wait $pid'");
  EXPECT_EQ(r.exit_code, 75) << r.err;
  const ProcessResult doctor = run_command(kBin + " doctor --flight " + run);
  ASSERT_EQ(doctor.exit_code, 0) << doctor.err;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(std::regex_search(doctor.out, std::regex("\n" + std::to_string(rank) + " .* SIGUSR2\n")))
        << doctor.out;
  }
}

}  // namespace
}  // namespace hpctrain::testing
