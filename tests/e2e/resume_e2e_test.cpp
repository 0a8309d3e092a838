// Checkpoints and resume through the real executable at -np 2 and 3: a run stopped mid-epoch and
// resumed ends bit-identical to one that never stopped; a resume on another rank count continues
// the epoch from its cursor; SIGUSR1 checkpoints and exits 75; a changed config is refused.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "e2e.h"
#include "process.h"
#include "same_checkpoints.h"
#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/core/system.h"

namespace hpctrain::testing {
namespace {

namespace fs = std::filesystem;


class ResumeEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const FashionSuite suite = make_fashion_suite("resume", 1200, 2);
    work_ = suite.work;
    data_ = suite.data;
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  // 1200 samples / (2 ranks x 32) = 19 steps an epoch, the last one padded. AdamW, warmup and a
  // cosine over 30 steps, dropout on: everything a resume must carry over.
  static std::string train(int ranks, const std::string& run, const std::string& extra) {
    return mpirun(ranks) + kBin + " train --config " + kSource + "/configs/fashion_cnn.ini --data.path=" + data_ +
           " --run.dir=" + work_ + "/" + run + " --train.threads=1 --data.eval_split= --train.batch_size=32" +
           " --train.epochs=2 --optim.name=adamw --optim.schedule=cosine --optim.warmup_steps=5" +
           " --optim.decay_steps=30 --log.every_steps=100 --ckpt.keep_last=0 " + extra;
  }
  static ckpt::NamedTensors group(const std::string& path, const std::string& name) {
    return ckpt::CheckpointReader(path).read_group(name);
  }

  static std::string work_;
  static std::string data_;
};

std::string ResumeEndToEnd::work_;
std::string ResumeEndToEnd::data_;

TEST_F(ResumeEndToEnd, StoppedMidEpochAndResumedEqualsUninterruptedToTheBit) {
  const ProcessResult whole = run_command(train(2, "whole", "--train.max_steps=30"));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const ProcessResult first = run_command(train(2, "split", "--train.max_steps=11"));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(count_lines_with(first.err, "starting fresh"), 1) << first.err;
  const ProcessResult second = run_command(train(2, "split", "--train.max_steps=30"));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  // Step 11 of epoch 1 took samples 0..703 of the epoch's order.
  EXPECT_EQ(count_lines_with(second.err, "ckpt-11.h5: step 11, epoch 1, sampler cursor 704"), 1) << second.err;

  const std::string a = work_ + "/whole/checkpoints/ckpt-30.h5";
  const std::string b = work_ + "/split/checkpoints/ckpt-30.h5";
  expect_same_tensors(a, b, {"model", "optim", "sched", "rng"});
  EXPECT_EQ(ckpt::CheckpointReader(b).meta().epoch, 1);
  EXPECT_EQ(ckpt::CheckpointReader(b).meta().cursor, 11 * 64);  // 30 = 19 + 11

  // ckpt inspect, verify and export on the result.
  const ProcessResult inspect = run_command(kBin + " ckpt inspect " + b);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("step 30, epoch 2 (0-based 1), sampler cursor 704"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("conv1.weight/exp_avg"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("rank-1/cpu"), std::string::npos) << inspect.out;
  const ProcessResult verify = run_command(kBin + " ckpt verify " + b);
  EXPECT_EQ(verify.exit_code, 0) << verify.err;
  EXPECT_NE(verify.out.find(" OK, "), std::string::npos) << verify.out;
  const std::string exported = work_ + "/model.pt";
  const ProcessResult exporting = run_command(kBin + " ckpt export " + b + " --to state_dict --out " + exported);
  ASSERT_EQ(exporting.exit_code, 0) << exporting.err;
  const std::string bytes = read_file(exported);
  const c10::Dict<c10::IValue, c10::IValue> state =
      torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
  const ckpt::NamedTensors model = group(b, "model");
  ASSERT_EQ(state.size(), model.size());
  for (const auto& [name, tensor] : model) EXPECT_TRUE(at::equal(state.at(name).toTensor(), tensor)) << name;
  // PyTorch's torch.load with weights_only=True (its default since 2.6) reads it: a plain dict.
  const ProcessResult loaded = run_command(
      "/usr/bin/python3 -c 'import sys, torch; print(len(torch.load(sys.argv[1], weights_only=True)))' " + exported);
  EXPECT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_EQ(loaded.out, std::to_string(model.size()) + "\n") << loaded.err;
  const ProcessResult wrong = run_command(kBin + " ckpt export " + b + " --to onnx --out " + exported);
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_EQ(count_lines_with(wrong.err, "hpctrain: error:"), 1) << wrong.err;

  // Resuming with another learning rate is refused, names the change, and leaves config.ini alone.
  const std::string config_before = read_file(work_ + "/split/config.ini");
  const ProcessResult changed = run_command(train(1, "split", "--train.max_steps=31 --optim.lr=0.01"));
  EXPECT_EQ(changed.exit_code, 2) << changed.err;
  EXPECT_EQ(count_lines_with(changed.err, "hpctrain: error:"), 1) << changed.err;
  EXPECT_NE(changed.err.find("optim.lr 0.002 -> 0.01"), std::string::npos) << changed.err;
  EXPECT_EQ(read_file(work_ + "/split/config.ini"), config_before);
}

// train.ema_decay: the moving average resumes exactly, differs from the trained weights, and is
// what `eval` scores and `ckpt export --ema` exports.
TEST_F(ResumeEndToEnd, AMovingAverageOfTheWeightsResumesExactlyAndIsWhatEvalAndExportUse) {
  const std::string average = " --train.ema_decay=0.9";
  const ProcessResult whole = run_command(train(2, "ema-whole", "--train.max_steps=16" + average));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(count_lines_with(whole.err, "keeping a moving average of the trained weights (train.ema_decay=0.9)"), 1)
      << whole.err;
  const ProcessResult first = run_command(train(2, "ema-split", "--train.max_steps=7 --ckpt.every_steps=1" + average));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // Step by step, each average moved a tenth of the way to the step's weights.
  for (int k = 2; k <= 7; ++k) {
    const std::string dir = work_ + "/ema-split/checkpoints/ckpt-";
    std::map<std::string, at::Tensor> before;
    for (const auto& [name, tensor] : group(dir + std::to_string(k - 1) + ".h5", "ema")) before[name] = tensor;
    const ckpt::NamedTensors now = group(dir + std::to_string(k) + ".h5", "ema");
    std::map<std::string, at::Tensor> weights;
    for (const auto& [name, tensor] : group(dir + std::to_string(k) + ".h5", "model")) weights[name] = tensor;
    for (const auto& [name, tensor] : now) {
      EXPECT_TRUE(at::allclose(tensor, at::lerp(before.at(name), weights.at(name), 0.1), 1e-5, 1e-7))
          << name << " at step " << k;
    }
  }
  const ProcessResult second = run_command(train(2, "ema-split", "--train.max_steps=16" + average));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const std::string a = work_ + "/ema-whole/checkpoints/ckpt-16.h5";
  const std::string b = work_ + "/ema-split/checkpoints/ckpt-16.h5";
  expect_same_tensors(a, b, {"model", "ema", "optim"});

  const ckpt::NamedTensors trained = group(b, "model");
  const ckpt::NamedTensors averaged = group(b, "ema");
  std::map<std::string, at::Tensor> by_name(trained.begin(), trained.end());
  ASSERT_FALSE(averaged.empty());
  bool differs = false;
  for (const auto& [name, tensor] : averaged) differs = differs || !at::equal(tensor, by_name.at(name));
  EXPECT_TRUE(differs) << "the average equals the trained weights";

  const std::string exported = work_ + "/ema.pt";
  const ProcessResult exporting = run_command(kBin + " ckpt export " + b + " --ema --out " + exported);
  ASSERT_EQ(exporting.exit_code, 0) << exporting.err;
  EXPECT_NE(exporting.out.find("(their moving average)"), std::string::npos) << exporting.out;
  const std::string bytes = read_file(exported);
  const c10::Dict<c10::IValue, c10::IValue> state =
      torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
  ASSERT_EQ(state.size(), trained.size());
  for (const auto& [name, tensor] : averaged) by_name[name] = tensor;  // buffers stay the trained ones
  for (const auto& [name, tensor] : by_name) EXPECT_TRUE(at::equal(state.at(name).toTensor(), tensor)) << name;
  const ProcessResult plain = run_command(train(1, "no-ema", "--train.max_steps=1"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const ProcessResult none =
      run_command(kBin + " ckpt export " + work_ + "/no-ema/checkpoints/ckpt-1.h5 --ema --out " + exported);
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_NE(none.err.find("holds none (no /ema group: train.ema_decay was 0)"), std::string::npos) << none.err;

  const ProcessResult eval = run_command(kBin + " eval --checkpoint " + b + " --config " + kSource +
                                         "/configs/fashion_cnn.ini --data.path=" + data_ + " --train.threads=1");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_EQ(count_lines_with(eval.err, "using the moving average of the weights that " + b + " holds"), 1) << eval.err;
}

TEST_F(ResumeEndToEnd, AnotherRankCountContinuesTheEpochFromItsCursor) {
  const ProcessResult first = run_command(train(2, "grow", "--train.max_steps=11"));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const ProcessResult second = run_command(train(3, "grow", "--train.max_steps=17 --log.every_steps=1"));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(count_lines_with(second.err, "written by 2 rank(s), this run has 3"), 1) << second.err;
  // 1200 - 704 samples left in epoch 1, 96 a step: 6 steps, 12 to 17.
  EXPECT_EQ(count_lines_with(second.err, "epoch 1 step 12 (1/6)"), 1) << second.err;
  EXPECT_EQ(count_lines_with(second.err, "epoch 1 step 17 (6/6)"), 1) << second.err;
  // What `data order` says the two runs trained on in epoch 1: 352 samples on each of 2 ranks up
  // to cursor 704, then the rest on 3 ranks; together, every sample once.
  std::vector<int> seen(1200, 0);
  const auto count = [&](int world, int rank, const std::string& extra) {
    const ProcessResult r = run_command(kBin + " data order --data " + data_ + " --epoch 1 --batch-size 32 --world-size " +
                                        std::to_string(world) + " --rank " + std::to_string(rank) + extra);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::istringstream in(r.out);
    for (std::int64_t index = 0; in >> index;) ++seen.at(static_cast<size_t>(index));
  };
  for (int rank = 0; rank < 2; ++rank) count(2, rank, " --limit 352");
  for (int rank = 0; rank < 3; ++rank) count(3, rank, " --from-cursor 704");
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "sample " << i;
}

// data.shuffle_window_mb (the 1,200-sample split still fits data.cache_mb=2; eviction while
// reading is covered by tests/data/loader_test.cpp): the run says it shuffles by chunks, a
// resume on 3 ranks continues the epoch, `data order --shuffle-window-mb` gives the order it used
// (every sample once over both runs), and that order is not the global shuffle's.
TEST_F(ResumeEndToEnd, ShufflingByChunksContinuesOnAnotherRankCount) {
  const std::string window = " --data.shuffle_window_mb=1 --data.cache_mb=2";
  const ProcessResult first = run_command(train(2, "chunks", "--train.max_steps=11" + window));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(count_lines_with(first.err, "shuffling by chunks (data.shuffle_window_mb=1): 2 blocks"), 1) << first.err;
  const ProcessResult refused = run_command(train(2, "chunks", "--train.max_steps=12 --data.cache_mb=2"));
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("data.shuffle_window_mb 1 -> 0"), std::string::npos) << refused.err;
  const ProcessResult second = run_command(train(3, "chunks", "--train.max_steps=17" + window));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  std::vector<int> seen(1200, 0);
  std::string chunked_order;
  const auto count = [&](int world, int rank, const std::string& extra) {
    const ProcessResult r = run_command(kBin + " data order --data " + data_ + " --epoch 1 --batch-size 32 --world-size " +
                                        std::to_string(world) + " --rank " + std::to_string(rank) + extra);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (chunked_order.empty()) chunked_order = r.out;
    std::istringstream in(r.out);
    for (std::int64_t index = 0; in >> index;) ++seen.at(static_cast<size_t>(index));
  };
  for (int rank = 0; rank < 2; ++rank) count(2, rank, " --limit 352 --shuffle-window-mb 1");
  for (int rank = 0; rank < 3; ++rank) count(3, rank, " --from-cursor 704 --shuffle-window-mb 1");
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "sample " << i;
  const ProcessResult global = run_command(kBin + " data order --data " + data_ +
                                           " --epoch 1 --batch-size 32 --world-size 2 --rank 0 --limit 352");
  EXPECT_NE(global.out, chunked_order);
  // The first 600 positions are one shard's samples, in a shuffled order.
  std::istringstream in(chunked_order);
  std::vector<std::int64_t> head;
  for (std::int64_t index = 0; in >> index;) head.push_back(index);
  ASSERT_EQ(head.size(), 352u);
  const bool first_shard = head.front() < 600;
  for (std::size_t k = 0; k < 300; ++k) ASSERT_EQ(head[k] < 600, first_shard) << k;
}

// ckpt.keep_best: the checkpoint of the best evaluation survives keep_last=1 and is named in `best`.
TEST_F(ResumeEndToEnd, KeepBestSparesTheBestEvaluationsCheckpoint) {
  const ProcessResult r = run_command(train(2, "best", "--data.eval_split=test --train.epochs=3 "
                                                       "--ckpt.keep_last=1 --ckpt.keep_best=true"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string best = ckpt::best_checkpoint(work_ + "/best/checkpoints");
  ASSERT_FALSE(best.empty()) << r.err;
  ASSERT_TRUE(fs::exists(best));
  double top = 0;
  std::istringstream metrics(read_file(work_ + "/best/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    const auto at = line.find("\"test_acc\":");
    if (at != std::string::npos) top = std::max(top, std::stod(line.substr(at + 11)));
  }
  const ckpt::NamedTensors stored = group(best, "metrics");
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_NEAR(stored[0].second.item<double>(), top, 1e-12);
  EXPECT_EQ(ckpt::list_checkpoints(work_ + "/best/checkpoints").size(), best == ckpt::latest_checkpoint(work_ + "/best/checkpoints") ? 1u : 2u);
}

// Two signals, the second while the first is being handled, change nothing; the ranks look at
// them every 3 steps.
TEST_F(ResumeEndToEnd, SigusrOneCheckpointsExitsSeventyFiveAndTheRunResumes) {
  const std::string dir = work_ + "/signal";
  fs::create_directories(dir);
  // Start a long run, signal mpirun once the first progress record is out, report the exit code.
  const ProcessResult stopped = run_command(
      "(" + train(2, "signal", "--train.epochs=100 --log.every_steps=2 --ckpt.check_every_steps=3") + ") > " + dir +
      "/out.log 2>&1 & pid=$!; for i in $(seq 1 600); do [ -s " + dir +
      "/metrics.jsonl ] && break; sleep 0.1; done; kill -USR1 $pid; sleep 0.3; kill -USR1 $pid; wait $pid;"
      " echo \"exit=$?\"");
  const std::string log = read_file(dir + "/out.log");
  EXPECT_NE(stopped.out.find("exit=75"), std::string::npos) << stopped.out << log;
  EXPECT_EQ(count_lines_with(log, "stop requested (SIGUSR1"), 1) << log;
  EXPECT_EQ(count_lines_with(log, "rerun the same command to resume (exit code 75)"), 1) << log;
  const std::string latest = ckpt::latest_checkpoint(dir + "/checkpoints");
  ASSERT_FALSE(latest.empty()) << log;
  EXPECT_EQ(run_command(kBin + " ckpt verify " + latest).exit_code, 0);
  const std::int64_t step = ckpt::CheckpointReader(latest).meta().step;
  EXPECT_GE(step, 3);
  EXPECT_EQ(step % 3, 0) << "the ranks agree on signals every ckpt.check_every_steps=3 steps";

  // Resumed with a timed checkpoint due at every step boundary (0.00001 minutes).
  const ProcessResult resumed = run_command(train(
      2, "signal", "--train.epochs=100 --ckpt.every_minutes=0.00001 --train.max_steps=" + std::to_string(step + 3)));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  for (std::int64_t s = step + 1; s <= step + 3; ++s) {
    EXPECT_TRUE(fs::exists(dir + "/checkpoints/ckpt-" + std::to_string(s) + ".h5")) << s << resumed.err;
  }
  EXPECT_EQ(count_lines_with(resumed.err, "resumed from " + latest + ": step " + std::to_string(step)), 1)
      << resumed.err;
}

// The last value of `key` in a run's metrics.jsonl (NaN when no record has it).
double last_metric(const std::string& metrics_path, const std::string& key) {
  double value = std::nan("");
  std::istringstream metrics(read_file(metrics_path));
  for (std::string line; std::getline(metrics, line);) {
    const auto at = line.find("\"" + key + "\":");
    if (at != std::string::npos) value = std::stod(line.substr(at + key.size() + 3));
  }
  return value;
}

// train.precision=bf16: the forward pass in bfloat16 changes the numbers (so autocast is on) but
// not where training goes: after 15 steps the loss is close to float32's.
TEST_F(ResumeEndToEnd, BfloatSixteenTrainsLikeFloatThirtyTwo) {
  std::map<std::string, double> last_loss;
  for (const char* precision : {"fp32", "bf16"}) {
    const std::string run = std::string("precision-") + precision;
    const ProcessResult r = run_command(
        train(2, run, std::string("--train.max_steps=15 --log.every_steps=5 --train.precision=") + precision));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    last_loss[precision] = last_metric(work_ + "/" + run + "/metrics.jsonl", "loss");
  }
  ASSERT_EQ(last_loss.size(), 2u);
  EXPECT_NE(last_loss["fp32"], last_loss["bf16"]) << "bf16 computed exactly what fp32 did: no autocast?";
  EXPECT_NEAR(last_loss["bf16"], last_loss["fp32"], 0.05 * last_loss["fp32"] + 0.02);
}

// Loss scaling (train.loss_scale; fp16's, here in fp32 on the CPU): scaling the loss by a power
// of two and the averaged gradients back is exact, so 12 steps of 2 micro-batches at -np 2 end
// with the same bits as without it. A scaled loss that is never unscaled, or unscaled twice,
// changes them (AdamW's eps sees the gradients' size).
TEST_F(ResumeEndToEnd, LossScalingByAPowerOfTwoChangesNoBit) {
  for (const char* scaling : {"none", "dynamic"}) {
    const ProcessResult r = run_command(train(2, std::string("scale-") + scaling,
                                              std::string("--train.max_steps=12 --train.accum_steps=2 "
                                                          "--train.loss_scale_init=1024 --train.loss_scale=") +
                                                  scaling));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  expect_same_tensors(work_ + "/scale-none/checkpoints/ckpt-12.h5", work_ + "/scale-dynamic/checkpoints/ckpt-12.h5",
                      {"model", "optim"});
  EXPECT_EQ(last_metric(work_ + "/scale-dynamic/metrics.jsonl", "loss_scale"), 1024.0);
  EXPECT_EQ(last_metric(work_ + "/scale-dynamic/metrics.jsonl", "skipped_steps"), 0.0);
  EXPECT_TRUE(std::isnan(last_metric(work_ + "/scale-none/metrics.jsonl", "loss_scale")));
}

// A scale of 1e40 overflows float32 (the scaled loss is inf already): those steps are skipped on
// both ranks alike (the replica check every step passes) and the scale halves until it fits. Stopped at step 11
// and resumed, the run continues from the checkpoint's scale and ends as one that never stopped;
// a resume that started again from 1e38 would skip steps anew.
TEST_F(ResumeEndToEnd, OverflowingStepsAreSkippedAndTheScaleSurvivesAResume) {
  const std::string scaled = "--train.loss_scale=dynamic --train.loss_scale_init=1e40 --dist.check_replicas_every=1 ";
  const ProcessResult whole = run_command(train(2, "overflow-whole", scaled + "--train.max_steps=30"));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const double skipped = last_metric(work_ + "/overflow-whole/metrics.jsonl", "skipped_steps");
  EXPECT_GE(skipped, 1.0) << whole.err;
  EXPECT_LT(skipped, 30.0) << whole.err;
  EXPECT_LT(last_metric(work_ + "/overflow-whole/metrics.jsonl", "loss_scale"), 3.5e38);
  EXPECT_TRUE(std::isfinite(last_metric(work_ + "/overflow-whole/metrics.jsonl", "loss")));

  ASSERT_EQ(run_command(train(2, "overflow-split", scaled + "--train.max_steps=11")).exit_code, 0);
  const ProcessResult resumed = run_command(train(2, "overflow-split", scaled + "--train.max_steps=30"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  expect_same_tensors(work_ + "/overflow-whole/checkpoints/ckpt-30.h5",
                      work_ + "/overflow-split/checkpoints/ckpt-30.h5", {"model", "optim", "loss_scaler", "sched"});
}

// The step that "hpctrain: error: step N: ..." names.
std::int64_t failed_step(const std::string& err) {
  const auto at = err.find("hpctrain: error: step ");
  return at == std::string::npos ? -1 : std::stoll(err.substr(at + 22));
}

// A learning rate of 1e30 makes the activations overflow from the second step or so on, on both
// ranks alike. train.nonfinite=abort stops at the first non-finite step with exit code 6, one
// error line, and a checkpoint of the state before it: that of a run stopped there. skip drops
// train.max_skipped steps in a row on both ranks (the replica check every step passes), leaving
// the weights and the optimizer as they were, and stops at the next.
TEST_F(ResumeEndToEnd, NonFiniteStepsAreSkippedOrStopTheRunWithTheLastGoodStateCheckpointed) {
  const std::string blowup = "--optim.lr=1e30 --optim.warmup_steps=0 --log.every_steps=1 ";
  const ProcessResult stopped = run_command(train(2, "nan-abort", blowup + "--train.max_steps=30 --train.nonfinite=abort"));
  ASSERT_EQ(stopped.exit_code, 6) << stopped.err;
  EXPECT_EQ(count_lines_with(stopped.err, "hpctrain: error:"), 1) << stopped.err;
  EXPECT_NE(stopped.err.find("the averaged gradient of '"), std::string::npos) << stopped.err;
  EXPECT_NE(stopped.err.find("train.nonfinite=abort stops at the first such step"), std::string::npos) << stopped.err;
  const std::int64_t bad = failed_step(stopped.err);
  ASSERT_GE(bad, 2) << stopped.err;
  ASSERT_LE(bad, 25) << stopped.err;
  const std::string good_steps = std::to_string(bad - 1);
  const ProcessResult good = run_command(train(2, "nan-good", blowup + "--train.max_steps=" + good_steps));
  ASSERT_EQ(good.exit_code, 0) << good.err;
  const std::string good_checkpoint = work_ + "/nan-good/checkpoints/ckpt-" + good_steps + ".h5";
  const std::string saved = work_ + "/nan-abort/checkpoints/ckpt-" + good_steps + ".h5";
  EXPECT_EQ(ckpt::latest_checkpoint(work_ + "/nan-abort/checkpoints"), saved);
  expect_same_tensors(saved, good_checkpoint, {"model", "optim", "sched"});

  const ProcessResult skipping = run_command(
      train(2, "nan-skip", blowup + "--train.max_steps=30 --train.max_skipped=3 --dist.check_replicas_every=1"));
  ASSERT_EQ(skipping.exit_code, 6) << skipping.err;
  EXPECT_EQ(count_lines_with(skipping.err, "hpctrain: error:"), 1) << skipping.err;
  EXPECT_EQ(failed_step(skipping.err), bad + 3) << skipping.err;
  EXPECT_EQ(count_lines_with(skipping.err, "skipped on every rank: the averaged gradient of '"), 3) << skipping.err;
  EXPECT_NE(skipping.err.find("4 step(s) in a row would be skipped, more than train.max_skipped=3 (the weights "
                              "are those after step " + good_steps + ")"),
            std::string::npos)
      << skipping.err;
  const std::string held = work_ + "/nan-skip/checkpoints/ckpt-" + std::to_string(bad + 2) + ".h5";
  expect_same_tensors(held, good_checkpoint, {"model", "optim"});
  EXPECT_EQ(last_metric(work_ + "/nan-skip/metrics.jsonl", "skipped_steps"), 3.0);
  const ckpt::NamedTensors sched = group(held, "sched");
  ASSERT_EQ(sched.size(), 3u);
  EXPECT_EQ(sched[1].first, "skipped_steps");
  EXPECT_EQ(sched[1].second.item<std::int64_t>(), 3);
}

// `hpctrain eval` of one checkpoint gives the same loss and accuracy at any world size: every
// rank evaluates its part, the sums are all-reduced (3 ranks split the 1,200 test samples unevenly
// into batches of 512).
TEST_F(ResumeEndToEnd, EvalAtThreeRanksEqualsOneRank) {
  const ProcessResult trained = run_command(train(2, "evalws", "--train.max_steps=5"));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string checkpoint = ckpt::latest_checkpoint(work_ + "/evalws/checkpoints");
  std::map<int, std::string> results;
  for (const int ranks : {1, 3}) {
    const ProcessResult r = run_command(mpirun(ranks) + kBin + " eval --checkpoint " + checkpoint + " --config " +
                                        work_ + "/evalws/config.ini --data.eval_split=test --train.threads=1");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::istringstream lines(r.err);
    for (std::string line; std::getline(lines, line);) {
      const auto at = line.find("test: 1200 samples, test_loss ");
      if (at != std::string::npos) results[ranks] = line.substr(at);
    }
  }
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[1], results[3]);
}

// train.eval_every evaluates inside the epoch too; the epoch's end is evaluated once.
TEST_F(ResumeEndToEnd, EvalEveryEvaluatesInsideTheEpoch) {
  const ProcessResult r = run_command(
      train(2, "evalevery", "--data.eval_split=test --train.max_steps=12 --train.eval_every=5"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<int> steps;
  std::istringstream metrics(read_file(work_ + "/evalevery/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("\"test_acc\"") == std::string::npos) continue;
    const auto at = line.find("\"step\":");
    steps.push_back(std::stoi(line.substr(at + 7)));
  }
  EXPECT_EQ(steps, (std::vector<int>{5, 10, 12})) << r.err;
}

// train.global_batch keeps the global batch (and the scaled learning rate) when a run resumes on
// more ranks, and refuses a rank count that does not divide it; clipping, applied to the averaged
// gradients, keeps the replicas identical (checked every step).
TEST_F(ResumeEndToEnd, TheGlobalBatchSurvivesAResumeOnMoreRanks) {
  const std::string options = "--train.global_batch=128 --optim.lr_scaling=linear --optim.base_batch=64 "
                              "--optim.clip_grad_norm=0.5 --train.label_smoothing=0.1 "
                              "--dist.check_replicas_every=1 --log.every_steps=1 ";
  const ProcessResult two = run_command(train(2, "global", options + "--train.max_steps=3"));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(count_lines_with(two.err, "global batch 128 (2 ranks x 2 micro-batch(es) x 32)"), 1) << two.err;
  EXPECT_EQ(count_lines_with(two.err, "learning rate 0.004: optim.lr 0.002 x linear scaling for global batch 128"),
            1) << two.err;
  EXPECT_EQ(count_lines_with(read_file(work_ + "/global/metrics.jsonl"), "\"grad_norm\":"), 3);

  const ProcessResult three = run_command(train(3, "global", options + "--train.max_steps=5"));
  EXPECT_EQ(three.exit_code, 2) << three.err;
  EXPECT_EQ(count_lines_with(three.err, "hpctrain: error:"), 1) << three.err;
  EXPECT_NE(three.err.find("train.global_batch=128 is not a multiple of 3 rank(s) x train.batch_size=32 = 96"),
            std::string::npos) << three.err;

  const ProcessResult four = run_command(train(4, "global", options + "--train.max_steps=5"));
  ASSERT_EQ(four.exit_code, 0) << four.err;
  EXPECT_EQ(count_lines_with(four.err, "global batch 128 (4 ranks x 1 micro-batch(es) x 32)"), 1) << four.err;
  EXPECT_EQ(count_lines_with(four.err, "the global batch stays 128 (train.global_batch; 1 micro-batch(es)"), 1)
      << four.err;
  EXPECT_EQ(ckpt::CheckpointReader(ckpt::latest_checkpoint(work_ + "/global/checkpoints")).meta().step, 5);
}

// srun delivers SIGTERM to the tasks themselves; a second one while the checkpoint is being
// written (its temporary file exists) must not cut the write short. A model large enough for the
// write to take a while: mlp 4096x4096 with AdamW, a 240 MB checkpoint.
TEST_F(ResumeEndToEnd, ASecondSigtermDuringTheWriteChangesNothing) {
  const std::string dir = work_ + "/term";
  fs::create_directories(dir);
  const std::string rank = "'^" + kBin + " train .*run.dir=" + dir + " '";
  const ProcessResult stopped = run_command(
      "(" + train(1, "term", "--train.epochs=100 --log.every_steps=1 --model.name=mlp --model.mlp_hidden=4096,4096") +
      ") > " + dir + "/out.log 2>&1 & pid=$!; for i in $(seq 1 600); do [ -s " + dir +
      "/metrics.jsonl ] && break; sleep 0.1; done; pkill -TERM -f " + rank +
      "; for i in $(seq 1 1000); do ls " + dir + "/checkpoints/*.tmp-* >/dev/null 2>&1 && break; sleep 0.005; done;"
      " ls " + dir + "/checkpoints/*.tmp-* >/dev/null 2>&1 && echo during-write; pkill -TERM -f " + rank +
      "; wait $pid; echo \"exit=$?\"");
  const std::string log = read_file(dir + "/out.log");
  EXPECT_NE(stopped.out.find("during-write"), std::string::npos) << "the second signal came after the write";
  EXPECT_NE(stopped.out.find("exit=75"), std::string::npos) << stopped.out << log;
  EXPECT_EQ(count_lines_with(log, "stop requested (SIGTERM"), 1) << log;
  const std::string latest = ckpt::latest_checkpoint(dir + "/checkpoints");
  ASSERT_FALSE(latest.empty()) << log;
  EXPECT_EQ(run_command(kBin + " ckpt verify " + latest).exit_code, 0);
  for (const auto& entry : fs::directory_iterator(dir + "/checkpoints")) {
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << "left behind: " << entry.path();
  }
}

// Writers killed at arbitrary moments (a checkpoint every step, so many kills land inside a write
// or around its rename): `latest` always names a complete checkpoint, and a resume continues.
// Each kill comes a while after the run's first step of this start (a new line in metrics.jsonl),
// so a slow start-up on a loaded machine cannot swallow it.
TEST_F(ResumeEndToEnd, AWriterKilledAtAnyMomentLeavesAResumableDirectory) {
  const std::string dir = work_ + "/killed";
  const std::string metrics = dir + "/metrics.jsonl";
  for (const char* delay : {"0.05", "0.3", "0.7"}) {
    // SIGKILL the rank itself (its command line starts with the binary), as a node failure would.
    const ProcessResult killed = run_command(
        "lines=$(cat " + metrics + " 2>/dev/null | wc -l); (" +
        train(1, "killed", "--train.epochs=100 --ckpt.every_steps=1 --ckpt.keep_last=2 --log.every_steps=1") +
        ") > /dev/null 2>&1 & pid=$!; for i in $(seq 1 600); do [ \"$(cat " + metrics +
        " 2>/dev/null | wc -l)\" -gt \"$lines\" ] && break; sleep 0.05; done; sleep " + delay + "; pkill -KILL -f '^" +
        kBin + " train .*run.dir=" + dir + " '; wait $pid; true");
    const std::string latest = ckpt::latest_checkpoint(dir + "/checkpoints");
    if (latest.empty()) continue;  // killed before the first checkpoint
    const ProcessResult verify = run_command(kBin + " ckpt verify " + latest);
    EXPECT_EQ(verify.exit_code, 0) << "after a kill " << delay << " s after a step: " << verify.out << verify.err;
  }
  const std::string latest = ckpt::latest_checkpoint(dir + "/checkpoints");
  ASSERT_FALSE(latest.empty()) << "no kill came after the first checkpoint";
  const std::int64_t step = ckpt::CheckpointReader(latest).meta().step;
  const ProcessResult finish =
      run_command(train(1, "killed", "--train.epochs=100 --train.max_steps=" + std::to_string(step + 2)));
  ASSERT_EQ(finish.exit_code, 0) << finish.err;
  EXPECT_EQ(count_lines_with(finish.err, "resumed from"), 1) << finish.err;
  for (const auto& entry : fs::directory_iterator(dir + "/checkpoints")) {
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << "left behind: " << entry.path();
  }
}

// A full disk (here a file-size limit) while writing: exit 4 with one clear line, and the earlier
// checkpoint and `latest` untouched.
TEST_F(ResumeEndToEnd, AFailedWriteLeavesTheEarlierCheckpointIntact) {
  const ProcessResult first = run_command(train(1, "full", "--train.max_steps=3"));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string latest = ckpt::latest_checkpoint(work_ + "/full/checkpoints");
  ASSERT_FALSE(latest.empty());
  // The rank (not mpirun) may write files of 2 MiB, well below a checkpoint's size; SIGXFSZ is
  // ignored, so writes fail with EFBIG as on a full disk.
  const std::string wrapper = work_ + "/small-files.sh";
  std::ofstream(wrapper) << "#!/bin/sh\ntrap '' XFSZ\nulimit -f 2048\nexec " << kBin << " \"$@\"\n";
  fs::permissions(wrapper, fs::perms::owner_all);
  // The final checkpoint written synchronously; then one every step in the background, whose
  // failure ends the run at the next step boundary.
  for (const std::string extra : {"", "--ckpt.async=true --ckpt.every_steps=1"}) {
    std::string command = train(1, "full", "--train.max_steps=5 " + extra);
    command.replace(command.find(kBin), kBin.size(), wrapper);
    const ProcessResult full = run_command(command);
    EXPECT_EQ(full.exit_code, 4) << extra << full.err;
    EXPECT_EQ(count_lines_with(full.err, "hpctrain: error:"), 1) << extra << full.err;
    EXPECT_NE(full.err.find("writing checkpoint"), std::string::npos) << extra << full.err;
    EXPECT_EQ(ckpt::latest_checkpoint(work_ + "/full/checkpoints"), latest) << extra;
    EXPECT_EQ(run_command(kBin + " ckpt verify " + latest).exit_code, 0) << extra;
    for (const auto& entry : fs::directory_iterator(work_ + "/full/checkpoints")) {
      EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << "left behind: " << entry.path();
    }
  }
}

// ckpt.async: the same checkpoints as synchronous writes, taken at the same moments, while
// training goes on; the run ends only after the last is on disk.
TEST_F(ResumeEndToEnd, BackgroundWritesEqualSynchronousOnes) {
  const std::string every = "--train.max_steps=12 --ckpt.every_steps=4 --ckpt.keep_last=2 ";
  const ProcessResult sync = run_command(train(2, "sync", every));
  ASSERT_EQ(sync.exit_code, 0) << sync.err;
  const ProcessResult async = run_command(train(2, "async", every + "--ckpt.async=true"));
  ASSERT_EQ(async.exit_code, 0) << async.err;
  EXPECT_EQ(count_lines_with(async.err, "written in the background in"), 3) << async.err;
  EXPECT_EQ(count_lines_with(async.err, "training waited"), 3) << async.err;
  const std::vector<std::string> written = ckpt::list_checkpoints(work_ + "/async/checkpoints");
  ASSERT_EQ(written.size(), 2u) << "ckpt.keep_last=2 prunes in the background too";
  EXPECT_EQ(ckpt::latest_checkpoint(work_ + "/async/checkpoints"), written[0]);
  for (const char* step : {"8", "12"}) {
    const std::string a = work_ + "/sync/checkpoints/ckpt-" + step + ".h5";
    const std::string b = work_ + "/async/checkpoints/ckpt-" + step + ".h5";
    expect_same_tensors(a, b, {"model", "optim", "rng"});
  }
}

}  // namespace
}  // namespace hpctrain::testing
