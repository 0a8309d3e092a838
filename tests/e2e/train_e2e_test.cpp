// End to end through the real executable: prepare a subset of Fashion-MNIST, train at -np 2, check
// the run directory, metrics.jsonl and the checkpoint, and evaluate the checkpoint.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <iomanip>
#include <optional>
#include <sstream>

#include "process.h"

namespace hpctrain::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kBin = HPCTRAIN_BIN;
const std::string kSource = HPCTRAIN_SOURCE_DIR;
const std::string kFashion = "/usr/share/datasets/fashion-mnist";

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> records;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) records.push_back(json::parse(line));
  return records;
}

class TrainEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    work_ = make_temp_dir("e2e");
    data_ = work_ + "/fashion-small";
    const ProcessResult r = run_command(kBin + " prepare fashion-mnist --source " + kFashion +
                                        " --out " + data_ + " --limit 3000");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(work_); }

  static std::string work_;
  static std::string data_;
};

std::string TrainEndToEnd::work_;
std::string TrainEndToEnd::data_;

TEST_F(TrainEndToEnd, PrepareWritesManifestAndSplits) {
  const json manifest = json::parse(read_file(data_ + "/manifest.json"));
  EXPECT_EQ(manifest["splits"]["train"]["samples"], 3000);
  EXPECT_EQ(manifest["splits"]["test"]["samples"], 3000);
  EXPECT_TRUE(fs::exists(data_ + "/train.h5"));
  EXPECT_TRUE(fs::exists(data_ + "/test.h5"));
  // No temporary directory is left beside the output.
  for (const auto& entry : fs::directory_iterator(work_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

TEST_F(TrainEndToEnd, PrepareRefusesToOverwriteAndLeavesTheOldDataset) {
  const auto before = fs::last_write_time(data_ + "/manifest.json");
  const ProcessResult r = run_command(kBin + " prepare fashion-mnist --source " + kFashion +
                                      " --out " + data_ + " --limit 10");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--overwrite"), std::string::npos) << r.err;
  EXPECT_EQ(fs::last_write_time(data_ + "/manifest.json"), before);
}

TEST_F(TrainEndToEnd, FailedImportLeavesNothingBehind) {
  const std::string out = work_ + "/never";
  const ProcessResult r = run_command(kBin + " prepare fashion-mnist --source " + work_ +
                                      " --out " + out);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "hpctrain: error:"), 1) << r.err;
  EXPECT_FALSE(fs::exists(out));
  for (const auto& entry : fs::directory_iterator(work_)) {
    EXPECT_EQ(entry.path().filename().string().find("never"), std::string::npos) << entry.path();
  }
}

TEST_F(TrainEndToEnd, TwoRanksTrainWriteMetricsAndACheckpointThatEvaluates) {
  const std::string run = work_ + "/run";
  const ProcessResult r = run_command(
      mpirun(2) + kBin + " train --config " + kSource + "/configs/fashion_cnn.ini --data.path=" +
      data_ + " --run.dir=" + run + " --train.epochs=2 --train.max_steps=40 --log.every_steps=5 --train.threads=1");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  // Progress lines come from rank 0 only.
  EXPECT_EQ(count_lines_with(r.err, "[1/2"), 0) << r.err;
  // 3000 samples / 2 ranks / 64 = 24 steps an epoch: records at 5 10 15 20 24 | 25 30 35 40.
  EXPECT_EQ(count_lines_with(r.err, "samples/s"), 9) << r.err;

  EXPECT_TRUE(fs::exists(run + "/config.ini"));
  EXPECT_TRUE(fs::exists(run + "/logs/rank-0.log"));
  EXPECT_TRUE(fs::exists(run + "/logs/rank-1.log"));

  const std::vector<json> records = read_jsonl(run + "/metrics.jsonl");
  std::vector<double> losses;
  std::optional<json> eval;
  int evaluations = 0;
  for (const auto& rec : records) {
    if (rec.contains("loss")) {
      for (const char* key : {"step", "epoch", "loss", "lr", "samples_per_s"}) {
        EXPECT_TRUE(rec.contains(key)) << key << " in " << rec.dump();
      }
      losses.push_back(rec["loss"].get<double>());
    }
    if (rec.contains("test_acc")) {
      eval = rec;
      ++evaluations;
    }
  }
  ASSERT_EQ(losses.size(), 9u);
  EXPECT_EQ(evaluations, 2);  // one per epoch, the second after the cut at max_steps
  EXPECT_EQ(records.front()["step"], 5);
  EXPECT_LT(losses.back(), losses.front()) << "loss did not fall";
  ASSERT_TRUE(eval.has_value());
  EXPECT_TRUE(eval->contains("test_loss"));
  EXPECT_GT((*eval)["test_acc"].get<double>(), 0.5);

  const std::string checkpoint = run + "/checkpoints/ckpt-40.h5";
  ASSERT_TRUE(fs::exists(checkpoint));
  EXPECT_EQ(read_file(run + "/checkpoints/latest"), "ckpt-40.h5\n");

  // The checkpoint loads and reproduces the training run's final evaluation.
  const ProcessResult e = run_command(kBin + " eval --checkpoint " + checkpoint + " --config " +
                                      run + "/config.ini --train.threads=1");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  std::ostringstream acc;
  acc << "test_acc " << std::fixed << std::setprecision(4) << (*eval)["test_acc"].get<double>();
  EXPECT_NE(e.err.find(acc.str()), std::string::npos) << "expected '" << acc.str() << "' in\n" << e.err;
}

TEST_F(TrainEndToEnd, CheckpointOfAnotherModelIsRejectedWithExitCode4) {
  const std::string run = work_ + "/run-mlp";
  const ProcessResult t = run_command(kBin + " train --data.path=" + data_ + " --run.dir=" + run +
                                      " --model.name=mlp --train.max_steps=2 --data.eval_split=");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const ProcessResult e = run_command(kBin + " eval --checkpoint " + run + "/checkpoints/ckpt-2.h5" +
                                      " --data.path=" + data_ + " --model.name=fashion_cnn");
  EXPECT_EQ(e.exit_code, 4) << e.err;
  EXPECT_EQ(count_lines_with(e.err, "hpctrain: error:"), 1) << e.err;
  EXPECT_NE(e.err.find("does not match this model"), std::string::npos) << e.err;
}

TEST_F(TrainEndToEnd, AnErrorOnOneRankEndsTheWholeJob) {
  // Rank 1 cannot open its log file (a directory is in the way) after MPI has started, while
  // rank 0 goes on into the first collective: rank 1 must bring the job down, not leave rank 0
  // waiting.
  const std::string run = work_ + "/run-broken";
  fs::create_directories(run + "/logs/rank-1.log");
  const ProcessResult r = run_command(
      "timeout 120 " + mpirun(2) + kBin + " train --data.path=" + data_ + " --run.dir=" + run +
      " --train.max_steps=5 --train.threads=1");
  EXPECT_NE(r.exit_code, 124) << "the job hung:\n" << r.err;
  EXPECT_EQ(r.exit_code, 2) << r.err;  // mpirun passes on the code given to MPI_Abort
  EXPECT_EQ(count_lines_with(r.err, "hpctrain: error: [1/2"), 1) << r.err;
  EXPECT_NE(r.err.find("rank-1.log"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hpctrain::testing
