// End to end through the real executable: prepare a subset of Fashion-MNIST, train at -np 2, check
// the run directory, metrics.jsonl and the checkpoint, and evaluate the checkpoint.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>

#include "e2e.h"
#include "process.h"
#include "hpctrain/core/system.h"

namespace hpctrain::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class TrainEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const FashionSuite suite = make_fashion_suite("e2e", 3000, 3, "fashion-small");
    work_ = suite.work;
    data_ = suite.data;
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  static std::string work_;
  static std::string data_;
};

std::string TrainEndToEnd::work_;
std::string TrainEndToEnd::data_;

TEST_F(TrainEndToEnd, PrepareWritesManifestAndSplits) {
  const json manifest = json::parse(read_file(data_ + "/manifest.json"));
  EXPECT_EQ(manifest["splits"]["train"]["samples"], 3000);
  EXPECT_EQ(manifest["splits"]["test"]["samples"], 3000);
  for (const char* split : {"train", "test"}) {
    const json& shards = manifest["splits"][split]["shards"];
    ASSERT_EQ(shards.size(), 3u) << split;
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(shards[k]["samples"], 1000);
      EXPECT_EQ(shards[k]["file"], std::string(split) + "-0000" + std::to_string(k) + ".h5");
      EXPECT_TRUE(fs::exists(data_ + "/" + shards[k]["file"].get<std::string>()));
    }
  }
  // No temporary directory is left beside the output.
  for (const auto& entry : fs::directory_iterator(work_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

TEST_F(TrainEndToEnd, PrepareRefusesToOverwriteAndLeavesTheOldDataset) {
  const auto before = fs::last_write_time(data_ + "/manifest.json");
  const ProcessResult r = run_command(kBin + " prepare fashion-mnist --source " + kFashionMnist +
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

// Small buckets (several per step), two micro-batches per step, a replica check after every step,
// and the split read through MPI-IO: real training keeps every rank's parameters bit-identical.
// Accumulation, small buckets, MPI-IO reads, synchronized BatchNorm and two loader threads together.
TEST_F(TrainEndToEnd, AccumulatedBucketedStepsKeepReplicasIdentical) {
  const std::string run = work_ + "/run_accum";
  const ProcessResult r = run_command(
      mpirun(2) + kBin + " train --config " + kSource + "/configs/fashion_cnn.ini --data.path=" +
      data_ + " --run.dir=" + run + " --train.max_steps=6 --log.every_steps=3 --train.threads=1" +
      " --train.accum_steps=2 --dist.bucket_mb=0.25 --dist.check_replicas_every=1 --data.eval_split=" +
      " --data.io=mpio --dist.sync_bn=true --data.loader_threads=2 --data.random_crop=2 --data.random_flip=true");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count_lines_with(r.err, "split 'train' read through MPI-IO by 2 rank(s)"), 1) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "dist.sync_bn: 2 BatchNorm layer(s) normalize over the batches of all 2"), 1)
      << r.err;
  EXPECT_EQ(count_lines_with(r.err, "global batch 256 (2 ranks x 2 micro-batch(es) x 64)"), 1) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "gradients in 3 bucket(s), overlap on"), 1) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "samples/s"), 2) << r.err;  // steps 3 and 6
  EXPECT_EQ(count_lines_with(r.err, "differ from rank 0"), 0) << r.err;
}

TEST_F(TrainEndToEnd, TwoRanksTrainWriteMetricsAndACheckpointThatEvaluates) {
  const std::string run = work_ + "/run";
  const ProcessResult r = run_command(
      mpirun(2) + kBin + " train --config " + kSource + "/configs/fashion_cnn.ini --data.path=" +
      data_ + " --run.dir=" + run + " --train.epochs=2 --train.max_steps=40 --log.every_steps=5 --train.threads=1" +
      " --train.peak_tflops=0.002");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  // Progress lines come from rank 0 only.
  EXPECT_EQ(count_lines_with(r.err, "[1/2"), 0) << r.err;
  // 3000 samples / 2 ranks / 64 = 24 steps an epoch: records at 5 10 15 20 24 | 25 30 35 40.
  EXPECT_EQ(count_lines_with(r.err, "samples/s"), 9) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "ms/step (data "), 9) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "samples/s (MFU "), 9) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "model arithmetic: 8.48 MFLOP per sample forward, 25.4 MFLOP per sample "
                                    "trained (3x forward); MFU against 0.002 TFLOP/s per device (train.peak_tflops)"),
            1)
      << r.err;
  const std::string last_line = r.err.substr(r.err.find("step 40 (16/24) "));
  EXPECT_NE(last_line.substr(0, last_line.find('\n')).find(", ETA 0s"), std::string::npos) << r.err;  // done

  EXPECT_TRUE(fs::exists(run + "/config.ini"));
  EXPECT_TRUE(fs::exists(run + "/logs/rank-0.log"));
  EXPECT_TRUE(fs::exists(run + "/logs/rank-1.log"));

  const std::vector<json> records = read_jsonl(run + "/metrics.jsonl");
  std::vector<double> losses;
  std::optional<json> eval;
  int evaluations = 0;
  for (const auto& rec : records) {
    if (rec.contains("loss")) {
      for (const char* key : {"step", "epoch", "loss", "lr", "samples_per_s", "step_ms", "data_ms", "comm_ms",
                              "compute_ms", "eta_s", "peak_rss_mb"}) {
        EXPECT_TRUE(rec.contains(key)) << key << " in " << rec.dump();
      }
      const double step_ms = rec["step_ms"].get<double>();
      EXPECT_GT(step_ms, 0.0) << rec.dump();
      EXPECT_NEAR(rec["data_ms"].get<double>() + rec["comm_ms"].get<double>() + rec["compute_ms"].get<double>(),
                  step_ms, 1e-6 * step_ms) << rec.dump();
      EXPECT_GT(rec["peak_rss_mb"].get<double>(), 10.0) << rec.dump();
      // fashion_cnn's forward takes 8,482,304 FLOPs a sample (model/flops_test.cpp), its training 3x
      // that; MFU against 2 ranks x train.peak_tflops.
      ASSERT_TRUE(rec.contains("model_tflops") && rec.contains("mfu")) << rec.dump();
      const double tflops = rec["model_tflops"].get<double>();
      EXPECT_NEAR(tflops, rec["samples_per_s"].get<double>() * 3 * 8482304 / 1e12, 1e-9 * tflops) << rec.dump();
      EXPECT_NEAR(rec["mfu"].get<double>(), tflops / (2 * 0.002), 1e-9) << rec.dump();
      EXPECT_FALSE(rec.contains("gpu_mem_mb")) << rec.dump();
      // ETA: the steps left to max_steps at this interval's pace.
      EXPECT_NEAR(rec["eta_s"].get<double>(), (40 - rec["step"].get<double>()) * step_ms / 1e3, 1e-9)
          << rec.dump();
      losses.push_back(rec["loss"].get<double>());
    }
    if (rec.contains("test_acc")) {
      eval = rec;
      ++evaluations;
    }
  }
  ASSERT_EQ(losses.size(), 9u);
  EXPECT_EQ(evaluations, 2);  // one per epoch, the second after the cut at max_steps
  // First, the start-up record: the first optimizer step, seconds after rank 0's process started.
  const json& first_step = records.front();
  ASSERT_TRUE(first_step.contains("first_step_s")) << first_step.dump();
  EXPECT_EQ(first_step["step"], 1);
  EXPECT_GT(first_step["first_step_s"].get<double>(), 0.0);
  EXPECT_LT(first_step["first_step_s"].get<double>(), 600.0);
  EXPECT_GT(first_step["unix_time"].get<double>(), 1.7e9);
  EXPECT_EQ(count_lines_with(r.err, "first optimizer step done "), 1) << r.err;
  EXPECT_EQ(records[1]["step"], 5);
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

std::vector<std::int64_t> read_indices(const std::string& text) {
  std::vector<std::int64_t> out;
  std::istringstream in(text);
  std::int64_t value = 0;
  while (in >> value) out.push_back(value);
  return out;
}

TEST_F(TrainEndToEnd, DataOrderDealsEveryTrainingSampleOnceAcrossRanks) {
  std::vector<int> seen(3000, 0);
  for (int rank = 0; rank < 3; ++rank) {
    const ProcessResult r = run_command(kBin + " data order --data " + data_ +
                                        " --world-size 3 --rank " + std::to_string(rank) + " --epoch 2");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto indices = read_indices(r.out);
    EXPECT_EQ(indices.size(), 1000u);
    for (const auto i : indices) ++seen.at(static_cast<size_t>(i));
  }
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "index " << i;
  // Without shuffling, one rank sees the dataset in file order.
  const ProcessResult head = run_command(kBin + " data order --data " + data_ +
                                         " --world-size 1 --rank 0 --epoch 2 --no-shuffle --limit 3");
  EXPECT_EQ(read_indices(head.out), (std::vector<std::int64_t>{0, 1, 2}));
  const ProcessResult bad = run_command(kBin + " data order --data " + data_ + " --world-size 2 --rank 2 --epoch 1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(count_lines_with(bad.err, "hpctrain: error:"), 1) << bad.err;
}

TEST_F(TrainEndToEnd, DataOrderOnATokenStreamPrintsWindowOffsetsThatResumeAtAnyWorldSize) {
  const std::string text = work_ + "/text.txt";
  {
    std::ofstream out(text);
    for (int i = 0; i < 400; ++i) out << "line " << i << "\n";
  }
  const std::string tokens = work_ + "/tokens";
  const ProcessResult prepared =
      run_command(kBin + " prepare text --source " + text + " --out " + tokens + " --shards 2");
  ASSERT_EQ(prepared.exit_code, 0) << prepared.err;
  const auto order = [&](int world, int rank, const std::string& extra) {
    const ProcessResult r = run_command(kBin + " data order --data " + tokens + " --block-size 32 --epoch 1" +
                                        " --batch-size 4 --world-size " + std::to_string(world) +
                                        " --rank " + std::to_string(rank) + extra);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return read_indices(r.out);
  };
  // One rank's windows, by position; W = 2 from cursor 8 (after one step) deals the rest out.
  const std::vector<std::int64_t> single = order(1, 0, "");
  ASSERT_GT(single.size(), 20u);
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<std::int64_t> part = order(2, rank, " --from-cursor 8");
    for (size_t k = 0; k < part.size() && 8 + rank + 2 * k < single.size(); ++k) {
      ASSERT_EQ(part[k], single[8 + rank + 2 * k]) << "rank " << rank << " window " << k;
    }
  }
  const ProcessResult missing = run_command(kBin + " data order --data " + tokens +
                                            " --world-size 1 --rank 0 --epoch 1");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("--block-size is required"), std::string::npos) << missing.err;
  const ProcessResult samples = run_command(kBin + " data order --data " + data_ +
                                            " --world-size 1 --rank 0 --epoch 1 --block-size 8");
  EXPECT_EQ(samples.exit_code, 2);
  EXPECT_EQ(count_lines_with(samples.err, "hpctrain: error:"), 1) << samples.err;
}

TEST_F(TrainEndToEnd, InspectVerifyNamesTheCorruptedShardAndField) {
  const ProcessResult good = run_command(kBin + " data inspect " + data_ + " --verify");
  ASSERT_EQ(good.exit_code, 0) << good.err;
  EXPECT_NE(good.out.find("image   uint8[1,28,28]"), std::string::npos) << good.out;
  EXPECT_NE(good.out.find("verify: all 6 shard(s) OK"), std::string::npos) << good.out;

  const std::string copy = work_ + "/corrupt";
  fs::copy(data_, copy, fs::copy_options::recursive);
  const std::string shard = copy + "/train-00001.h5";
  {  // Flip a byte in the middle of the image data of the second train shard.
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(shard) / 2));
    const char byte = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) / 2));
    f.put(static_cast<char>(~byte));
  }
  const ProcessResult structure = run_command(kBin + " data inspect " + copy);
  EXPECT_EQ(structure.exit_code, 0) << "metadata is intact: " << structure.err;
  const ProcessResult bad = run_command(kBin + " data inspect " + copy + " --verify");
  EXPECT_EQ(bad.exit_code, 3) << bad.out << bad.err;
  EXPECT_EQ(count_lines_with(bad.err, "hpctrain: error:"), 1) << bad.err;
  EXPECT_NE(bad.err.find("train-00001.h5: field 'image'"), std::string::npos) << bad.err;

  fs::remove(copy + "/test-00002.h5");
  const ProcessResult missing = run_command(kBin + " data inspect " + copy);
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_NE(missing.err.find("test-00002.h5: shard listed in the manifest is missing"), std::string::npos)
      << missing.err;
  hpctrain::sys::remove_tree(copy);
}

TEST_F(TrainEndToEnd, BenchDataReportsEveryCaseAndPassesItsCheck) {
  for (const std::string data_io : {"mmap", "posix"}) {
    const ProcessResult r = run_command(kBin + " bench data --data " + data_ + " --repeats 1 --data-io " + data_io);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const std::string row : {"raw sequential read", "loader sequential", "loader shuffled", "check: OK (label sum ",
                                  data_io == "mmap" ? "shard files mapped (data.io=mmap)" : "files read (data.io=posix)",
                                  "each timed in turn with a raw read", "% of raw"}) {
      EXPECT_NE(r.out.find(row), std::string::npos) << row << " in\n" << r.out;
    }
    // samples/s, MB/s, the raw read's MB/s timed with the case, % of it, blocks/pass (compare.sh
    // reads them by position), and last the min-max MB/s of the passes.
    const std::string name = "loader shuffled, 1T";
    const size_t at = r.out.find(name);
    ASSERT_NE(at, std::string::npos) << r.out;
    std::istringstream row(r.out.substr(at + name.size(), r.out.find('\n', at) - at - name.size()));
    double samples = 0, mbps = 0, raw_mbps = 0, share = 0, blocks = -1;
    std::string range;
    std::string extra;
    ASSERT_TRUE(row >> samples >> mbps >> raw_mbps >> share >> blocks >> range) << r.out;
    EXPECT_FALSE(row >> extra) << "a seventh column: " << extra;
    const size_t dash = range.find('-');
    ASSERT_NE(dash, std::string::npos) << range;
    EXPECT_DOUBLE_EQ(std::stod(range.substr(0, dash)), mbps) << "one timed pass: min = median = max";
    EXPECT_DOUBLE_EQ(std::stod(range.substr(dash + 1)), mbps) << range;
    EXPECT_GT(raw_mbps, 0.0);
    EXPECT_NEAR(share, 100.0 * mbps / raw_mbps, 0.1 + 0.001 * share) << r.out;
    EXPECT_EQ(blocks, 0.0) << "a split held whole is read once, in the first pass";
  }
  EXPECT_EQ(run_command(kBin + " bench data --data " + data_ + " --repeats 0").exit_code, 2);
  // Shuffled by chunks, page cache dropped before every pass; a window the cache cannot hold twice.
  const ProcessResult chunks =
      run_command(kBin + " bench data --data " + data_ + " --repeats 1 --cache-mb 3 --shuffle-window-mb 1 --cold");
  ASSERT_EQ(chunks.exit_code, 0) << chunks.err;
  for (const char* row : {"loader by chunks, 1T", "page cache dropped before every pass", "check: OK (label sum ",
                          "against the first raw read"}) {
    EXPECT_NE(chunks.out.find(row), std::string::npos) << row << " in\n" << chunks.out;
  }
  EXPECT_EQ(run_command(kBin + " bench data --data " + data_ + " --cache-mb 2 --shuffle-window-mb 2").exit_code, 2);
  // posix against MPI-IO, every rank dropping the files from its page cache before every read.
  const ProcessResult io = run_command(mpirun(2) + kBin + " bench data --data " + data_ + " --io --repeats 1 --cold");
  ASSERT_EQ(io.exit_code, 0) << io.err;
  for (const char* row : {"read whole into memory on each of 2 rank(s)", "page cache dropped before every read (--cold)",
                          "\nposix ", "\nmpio "}) {
    EXPECT_NE(io.out.find(row), std::string::npos) << row << " in\n" << io.out;
  }
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
