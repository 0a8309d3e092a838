// `hpctrain doctor` and the training preflight through the real executable under mpirun.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "e2e.h"
#include "process.h"
#include "hpctrain/core/system.h"

namespace hpctrain::testing {
namespace {

namespace fs = std::filesystem;


class DoctorEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const FashionSuite suite = make_fashion_suite("doctor", 600, 1);
    work_ = suite.work;
    data_ = suite.data;
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }
  static std::string work_;
  static std::string data_;
};

std::string DoctorEndToEnd::work_;
std::string DoctorEndToEnd::data_;

TEST_F(DoctorEndToEnd, AHealthyJobPassesEveryCheckAndLeavesNoTrace) {
  const std::string run_dir = work_ + "/fresh-run";
  const ProcessResult r =
      run_command(mpirun(3) + kBin + " doctor --data.path=" + data_ + " --run.dir=" + run_dir + " --size-mb 1");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* row : {"0      ", "1      ", "2      "}) {
    EXPECT_EQ(count_lines_with(r.out, std::string(row) + sys::host_name()), 1) << r.out;
  }
  EXPECT_NE(r.out.find("1/3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("libtorch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("HDF5"), std::string::npos) << r.out;
  for (const char* check : {"world", "devices", "allreduce", "bandwidth", "run.dir", "data"}) {
    EXPECT_NE(r.out.find("\n" + std::string(check) + std::string(11 - std::string(check).size(), ' ') + "PASS"),
              std::string::npos) << check << r.out;
  }
  EXPECT_EQ(count_lines_with(r.out, " PASS "), 6) << r.out;
  EXPECT_NE(r.out.find("doctor: 6 checks passed"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(run_dir)) << "doctor created the run directory and left it behind";
}

TEST_F(DoctorEndToEnd, FailedChecksSayWhatToDoAndSetTheExitCode) {
  const ProcessResult r = run_command(mpirun(2) + kBin + " doctor --data.path=" + work_ + "/missing" +
                                      " --run.dir=/proc/no-such-dir --size-mb 1");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;  // run.dir comes before data: its kind decides
  EXPECT_EQ(count_lines_with(r.out, " FAIL "), 2) << r.out;
  EXPECT_EQ(count_lines_with(r.out, "choose a run.dir every rank can write"), 1) << r.out;
  EXPECT_EQ(count_lines_with(r.out, "ranks 0, 1 (" + sys::host_name() + "): dataset"), 1) << r.out;
  EXPECT_EQ(count_lines_with(r.err, "hpctrain: error: doctor: check(s) failed: run.dir, data"), 1) << r.err;

  const ProcessResult data_only = run_command(mpirun(2) + kBin + " doctor --data.path=" + work_ + "/missing" +
                                              " --run.dir=" + work_ + "/run --size-mb 1");
  EXPECT_EQ(data_only.exit_code, 3) << data_only.out << data_only.err;
}

// Ranks started with different overrides (an MPMD launch stands for a node with another config
// file): the preflight names the rank and stops the job within seconds, before writing anything.
TEST_F(DoctorEndToEnd, PreflightStopsRanksWithDifferentConfigs) {
  const std::string run_dir = work_ + "/mixed";
  const std::string train = kBin + " train --config " + kSource + "/configs/fashion_cnn.ini --data.path=" + data_ +
                            " --run.dir=" + run_dir + " --data.eval_split= --train.max_steps=2";
  const ProcessResult r = run_command(mpirun(1) + train + " --optim.lr=0.1 : -np 1 " + train + " --optim.lr=0.2");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "hpctrain: error:"), 1) << r.err;
  EXPECT_NE(r.err.find("rank 1 (" + sys::host_name() + ") resolved a different config than rank 0"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(run_dir)) << "the preflight runs before the run directory is created";

  const ProcessResult doctor = run_command(mpirun(1) + kBin + " doctor --run.dir=" + run_dir + " --train.seed=1 : -np 1 " +
                                           kBin + " doctor --run.dir=" + run_dir + " --train.seed=2");
  EXPECT_EQ(doctor.exit_code, 2) << doctor.out << doctor.err;
  EXPECT_NE(doctor.out.find("world      FAIL   rank 1"), std::string::npos) << doctor.out;
  EXPECT_NE(doctor.out.find("not run: fix world and devices first"), std::string::npos) << doctor.out;
}

// Launch mistakes: each a single line, exit code, nothing written, and no hang.
TEST_F(DoctorEndToEnd, LaunchMistakesAreOneLineErrors) {
  const std::string run_dir = work_ + "/launch";
  const std::string train = " train --config " + kSource + "/configs/fashion_cnn.ini --data.path=" + data_ +
                            " --run.dir=" + run_dir + " --data.eval_split= --train.max_steps=2";
  // hpctrain started by the batch script itself, not by srun, in a job of 4 tasks.
  const ProcessResult batch = run_command("env SLURM_JOB_ID=7 SLURM_NTASKS=4 " + kBin + train);
  EXPECT_EQ(batch.exit_code, 2) << batch.err;
  EXPECT_EQ(count_lines_with(batch.err, "hpctrain: error:"), 1) << batch.err;
  EXPECT_NE(batch.err.find("SLURM_NTASKS=4 tasks: start it with srun"), std::string::npos) << batch.err;
  EXPECT_FALSE(fs::exists(run_dir));

  // A launcher that announced 3 ranks to a process whose MPI sees only itself.
  const ProcessResult foreign = run_command("env PMI_SIZE=3 " + kBin + train);
  EXPECT_EQ(foreign.exit_code, 2) << foreign.err;
  EXPECT_NE(foreign.err.find("the launcher started 3 ranks, but MPI sees a world of 1"), std::string::npos)
      << foreign.err;
  EXPECT_FALSE(fs::exists(run_dir));

  // Rank 1 never reaches MPI (a hung file system, say): rank 0 gives up after dist.timeout_s.
  const std::string late = work_ + "/late-rank.sh";
  std::ofstream(late) << "#!/bin/sh\n[ \"$OMPI_COMM_WORLD_RANK\" = 1 ] && sleep 120\nexec " << kBin << " \"$@\"\n";
  fs::permissions(late, fs::perms::owner_all);
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult hung = run_command(mpirun(2) + late + train + " --dist.timeout_s=3");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(hung.exit_code, 5) << hung.err;
  EXPECT_NE(hung.err.find("hpctrain: error: [rank 0 " + sys::host_name() +
                          "] not every rank joined within dist.timeout_s=3 s"), std::string::npos) << hung.err;
  EXPECT_LT(seconds, 60) << "the job waited for the missing rank";
  EXPECT_FALSE(fs::exists(run_dir));
}

}  // namespace
}  // namespace hpctrain::testing
