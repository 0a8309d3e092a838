// A language model end to end through the real executable: `prepare text`, then the gpt model
// trained at -np 2 on the token stream (tokens/s and perplexity in the metrics), stopped and
// resumed bit-identically, resumed on 3 ranks from the cursor, its checkpoint evaluated at other
// world sizes; a model and dataset that do not fit each other are refused in one line.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "e2e.h"
#include "process.h"
#include "same_checkpoints.h"
#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/core/system.h"

namespace hpctrain::testing {
namespace {

using json = nlohmann::json;


class LanguageModelEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    work_ = make_temp_dir("lm");
    const std::string text = work_ + "/text.txt";
    {  // About 60 KB of regular text: a small model learns it quickly.
      std::ofstream out(text);
      for (int i = 0; i < 1400; ++i) out << "the quick brown fox " << i % 97 << " jumps over the lazy dog\n";
    }
    tokens_ = work_ + "/tokens";
    const ProcessResult r = run_command(kBin + " prepare text --source " + text + " --out " + tokens_ + " --shards 2");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Language models scripted in PyTorch: one for this vocabulary (256 bytes), one for another.
    for (const auto& [file, vocab] : {std::pair<const char*, int>{"scripted-lm.pt", 256}, {"scripted-lm-100.pt", 100}}) {
      const ProcessResult exported = run_command("/usr/bin/python3 " + kSource + "/tests/support/export_torchscript.py " +
                                                 work_ + "/" + file + " --language-model " + std::to_string(vocab) +
                                                 " --block 32");
      ASSERT_EQ(exported.exit_code, 0) << exported.out << exported.err;
    }
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  // Windows of 32 tokens, 8 per rank and step; AdamW with warmup and a cosine; dropout on.
  static std::string train(int ranks, const std::string& run, const std::string& extra) {
    return mpirun(ranks) + kBin + " train --data.path=" + tokens_ + " --data.eval_split=val --model.name=gpt" +
           " --model.gpt_layers=2 --model.gpt_heads=2 --model.gpt_embd=32 --model.gpt_block_size=32" +
           " --model.dropout=0.1 --train.batch_size=8 --train.threads=1 --optim.name=adamw --optim.lr=0.003" +
           " --optim.schedule=cosine --optim.warmup_steps=5 --optim.decay_steps=40 --log.every_steps=5" +
           " --ckpt.keep_last=0 --run.dir=" + work_ + "/" + run + " " + extra;
  }
  static std::vector<json> metrics(const std::string& run) { return read_jsonl(work_ + "/" + run + "/metrics.jsonl"); }

  static std::string work_;
  static std::string tokens_;
};

std::string LanguageModelEndToEnd::work_;
std::string LanguageModelEndToEnd::tokens_;

TEST_F(LanguageModelEndToEnd, TrainsWithTokensPerSecondAndPerplexityAndEvaluatesAtAnyWorldSize) {
  const ProcessResult r = run_command(train(2, "lm", "--train.max_steps=20"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count_lines_with(r.err, "tokens/s, "), 4) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "training on a stream of "), 1) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "done: 20 steps, test loss "), 1) << r.err;

  std::vector<double> losses;
  std::optional<json> eval;
  for (const json& record : metrics("lm")) {
    if (record.contains("loss")) {
      ASSERT_TRUE(record.contains("tokens_per_s")) << record.dump();
      EXPECT_NEAR(record["tokens_per_s"].get<double>(), 32 * record["samples_per_s"].get<double>(),
                  1e-6 * record["tokens_per_s"].get<double>());
      // Counted, but no MFU on a CPU unless train.peak_tflops is set.
      EXPECT_GT(record.value("model_tflops", 0.0), 0.0) << record.dump();
      EXPECT_FALSE(record.contains("mfu")) << record.dump();
      losses.push_back(record["loss"].get<double>());
    }
    if (record.contains("test_ppl")) eval = record;
  }
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_LT(losses.front(), std::log(256.0) + 0.5);  // about uniform over the bytes at the start
  EXPECT_LT(losses.back(), losses.front() - 1.0) << "the loss did not fall";
  ASSERT_TRUE(eval.has_value());
  EXPECT_NEAR((*eval)["test_ppl"].get<double>(), std::exp((*eval)["test_loss"].get<double>()), 1e-9);
  EXPECT_LT((*eval)["test_loss"].get<double>(), losses.front());

  // The checkpoint reproduces that evaluation on 1 and on 3 ranks: the windows end to end,
  // shared out differently.
  std::ostringstream expected;
  expected << std::fixed;
  expected.precision(4);
  expected << "test_loss " << (*eval)["test_loss"].get<double>() << ", test_ppl ";
  for (const int ranks : {1, 3}) {
    const ProcessResult e = run_command(mpirun(ranks) + kBin + " eval --checkpoint " + work_ +
                                        "/lm/checkpoints/ckpt-20.h5 --config " + work_ + "/lm/config.ini");
    ASSERT_EQ(e.exit_code, 0) << e.err;
    EXPECT_NE(e.err.find(expected.str()), std::string::npos) << ranks << " rank(s): expected '" << expected.str()
                                                             << "' in\n" << e.err;
  }

  // The PyTorch gpt of jobs/bench/ddp_reference.py (the benchmarks' reference) is the same
  // network: the exported weights load into it strictly and give the same held-out loss.
  const std::string exported = work_ + "/lm.pt";
  ASSERT_EQ(run_command(kBin + " ckpt export " + work_ + "/lm/checkpoints/ckpt-20.h5 --to state_dict --out " +
                        exported).exit_code, 0);
  const ProcessResult reference = run_command(
      "/usr/bin/python3 " + kSource + "/jobs/bench/ddp_reference.py --model gpt --data " + work_ +
      "/text.txt --check-state-dict " + exported + " --layers 2 --heads 2 --embd 32 --block-size 32");
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const json scored = json::parse(reference.out);
  EXPECT_NEAR(scored["test_loss"].get<double>(), (*eval)["test_loss"].get<double>(),
              1e-5 * (*eval)["test_loss"].get<double>()) << reference.out;
}

// `bench step --model gpt` times the gpt that training builds, with the FLOPs training counts;
// jobs/bench/torch_step.py, its PyTorch counterpart in gpu-verify.sh, builds the same network.
TEST_F(LanguageModelEndToEnd, BenchStepTimesTheGptThatThePyTorchStepBuilds) {
  const std::string sizes = " --layers 2 --heads 2 --embd 32 --block-size 16 --vocab 64 --batch-size 2 --steps 2";
  const ProcessResult ours = run_command(mpirun(2) + kBin + " bench step --model gpt --precision bf16" + sizes);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  const std::string header = "# bench step: gpt, ";
  const size_t at = ours.out.find(header);
  ASSERT_NE(at, std::string::npos) << ours.out;
  const long parameters = std::stol(ours.out.substr(at + header.size()));
  // 2 x (24 T d^2 + 4 T^2 d) + 2 T d V forward FLOPs a window (T 16, d 32, V 64), 3x trained.
  EXPECT_NE(ours.out.find("# 0.002753 GFLOP per sample trained"), std::string::npos) << ours.out;
  std::istringstream rows(ours.out);
  std::string line;
  while (std::getline(rows, line) && line.rfind("forward+backward", 0) != 0) {
  }
  std::istringstream row(line.substr(std::string("forward+backward").size()));
  double ms = 0, samples = 0, tokens = 0, tflops = 0;
  std::string mfu;
  ASSERT_TRUE(row >> ms >> samples >> tokens >> tflops >> mfu) << ours.out;
  EXPECT_NEAR(tokens, 16 * samples, 16.0) << line;  // rounded to whole numbers
  // Per device: a rank's 2 samples over the step time (not the rounded samples/s, a few per cent
  // off at a few samples/s).
  const double expected_tflops = 2 / (ms / 1e3) * 2752512 / 1e12;
  EXPECT_NEAR(tflops, expected_tflops, 0.01 * expected_tflops) << line;
  EXPECT_EQ(mfu, "-") << "no peak is known on a CPU: " << line;

  const ProcessResult theirs =
      run_command("/usr/bin/python3 " + kSource + "/jobs/bench/torch_step.py --device cpu --precision bf16" + sizes);
  ASSERT_EQ(theirs.exit_code, 0) << theirs.err;
  const json reference = json::parse(theirs.out);
  EXPECT_EQ(reference["parameters"].get<long>(), parameters) << ours.out << theirs.out;
  EXPECT_GT(reference["forward_backward_ms"].get<double>(), 0) << theirs.out;
}

// `bench step --update` times whole optimizer steps of the same gpt with AdamW per tensor and
// multi-tensor, each row with the FLOPs training counts; torch_step.py --update is its PyTorch side.
TEST_F(LanguageModelEndToEnd, BenchStepUpdateTimesWholeStepsBothWays) {
  const std::string sizes = " --layers 2 --heads 2 --embd 32 --block-size 16 --vocab 64 --batch-size 2 --steps 2";
  const ProcessResult ours = run_command(kBin + " bench step --model gpt --update" + sizes);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  EXPECT_NE(ours.out.find("# 0.002753 GFLOP per sample trained"), std::string::npos) << ours.out;
  for (const std::string name : {"step, AdamW per tensor", "step, AdamW multi-tensor"}) {
    const size_t at = ours.out.find("\n" + name);
    ASSERT_NE(at, std::string::npos) << name << ": " << ours.out;
    std::istringstream row(ours.out.substr(at + 1 + name.size()));
    double ms = 0, samples = 0, tokens = 0, tflops = 0;
    ASSERT_TRUE(row >> ms >> samples >> tokens >> tflops) << ours.out;
    EXPECT_NEAR(samples, 2 / (ms / 1e3), 0.01 * samples + 1) << name;
    // From the step time (3 decimals), not the rounded samples/s: at a few samples/s the
    // rounding alone is a few per cent.
    EXPECT_NEAR(tflops, 2 / (ms / 1e3) * 2752512 / 1e12, 0.01 * tflops) << name;
  }
  EXPECT_NE(ours.out.find("multi-tensor / per tensor speed: "), std::string::npos) << ours.out;
  EXPECT_EQ(ours.out.find("CUDA graph"), std::string::npos) << "no graphs without --cuda-graphs: " << ours.out;

  const ProcessResult theirs =
      run_command("/usr/bin/python3 " + kSource + "/jobs/bench/torch_step.py --device cpu --update" + sizes);
  ASSERT_EQ(theirs.exit_code, 0) << theirs.err;
  const json reference = json::parse(theirs.out);
  EXPECT_GT(reference["step_ms"].get<double>(), 0) << theirs.out;
}

TEST_F(LanguageModelEndToEnd, StoppedAndResumedEqualsUninterruptedAndContinuesOnThreeRanks) {
  const ProcessResult whole = run_command(train(2, "whole", "--train.max_steps=24 --data.eval_split="));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  ASSERT_EQ(run_command(train(2, "split", "--train.max_steps=10 --data.eval_split=")).exit_code, 0);
  const ProcessResult second = run_command(train(2, "split", "--train.max_steps=24 --data.eval_split="));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  // Ten steps of 2 ranks x 8 windows: the global cursor is at window 160.
  EXPECT_EQ(count_lines_with(second.err, "ckpt-10.h5: step 10, epoch 1, sampler cursor 160"), 1) << second.err;
  const std::string a = work_ + "/whole/checkpoints/ckpt-24.h5";
  const std::string b = work_ + "/split/checkpoints/ckpt-24.h5";
  expect_same_tensors(a, b, {"model", "optim"});

  // On 3 ranks the same checkpoint continues from window 160, 24 windows a step.
  ASSERT_EQ(run_command(train(2, "wider", "--train.max_steps=10 --data.eval_split=")).exit_code, 0);
  const ProcessResult wider = run_command(train(3, "wider", "--train.max_steps=24 --data.eval_split="));
  ASSERT_EQ(wider.exit_code, 0) << wider.err;
  EXPECT_EQ(count_lines_with(wider.err, "the checkpoint was written by 2 rank(s), this run has 3"), 1) << wider.err;
  EXPECT_EQ(ckpt::CheckpointReader(work_ + "/wider/checkpoints/ckpt-24.h5").meta().cursor, 160 + 14 * 24);
}

// A language model scripted in PyTorch (tests/support/export_torchscript.py --language-model, its
// output layer tied to the token embedding) trains on the token stream like gpt: tokens/s, a
// falling loss and perplexity; a stop and resume ends bit-identical; `hpctrain eval` reproduces
// its held-out loss on 3 ranks.
TEST_F(LanguageModelEndToEnd, AScriptedLanguageModelTrainsResumesAndEvaluates) {
  const std::string scripted = " --model.name=torchscript --model.path=" + work_ + "/scripted-lm.pt";
  const ProcessResult whole = run_command(train(2, "scripted", "--train.max_steps=20" + scripted));
  ASSERT_EQ(whole.exit_code, 0) << whole.out << whole.err;
  EXPECT_EQ(count_lines_with(whole.err, "tokens/s, "), 4) << whole.err;
  // Its output layer is the token embedding, as GPT-2's.
  EXPECT_EQ(count_lines_with(whole.err, "tied weights: 'head.weight' is 'tokens.weight'"), 1) << whole.err;
  std::vector<double> losses;
  std::optional<json> eval;
  for (const json& record : metrics("scripted")) {
    if (record.contains("loss")) losses.push_back(record["loss"].get<double>());
    if (record.contains("test_ppl")) eval = record;
  }
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_LT(losses.back(), losses.front() - 0.5) << "the loss did not fall";
  ASSERT_TRUE(eval.has_value());
  EXPECT_NEAR((*eval)["test_ppl"].get<double>(), std::exp((*eval)["test_loss"].get<double>()), 1e-9);

  ASSERT_EQ(run_command(train(2, "scripted-split", "--train.max_steps=10" + scripted)).exit_code, 0);
  const ProcessResult resumed = run_command(train(2, "scripted-split", "--train.max_steps=20" + scripted));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(count_lines_with(resumed.err, "resumed from "), 1) << resumed.err;
  expect_same_tensors(work_ + "/scripted/checkpoints/ckpt-20.h5", work_ + "/scripted-split/checkpoints/ckpt-20.h5",
                      {"model", "optim"});

  std::ostringstream expected;
  expected << std::fixed;
  expected.precision(4);
  expected << "test_loss " << (*eval)["test_loss"].get<double>() << ", test_ppl ";
  const ProcessResult e = run_command(mpirun(3) + kBin + " eval --checkpoint " + work_ +
                                      "/scripted/checkpoints/ckpt-20.h5 --config " + work_ + "/scripted/config.ini");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.err.find(expected.str()), std::string::npos) << "expected '" << expected.str() << "' in\n" << e.err;

  // It generates too (no KV cache: the whole context each token), greedily alike at 1 and 2 ranks.
  const std::string prompts = work_ + "/prompts.txt";
  std::ofstream(prompts) << "the quick\nover the lazy\n";
  std::vector<std::string> outputs;
  for (const int ranks : {1, 2}) {
    const ProcessResult g = run_command(mpirun(ranks) + kBin + " generate --checkpoint " + work_ +
                                        "/scripted/checkpoints/ckpt-20.h5 --prompts " + prompts +
                                        " --max-new-tokens 8 --temperature 0");
    ASSERT_EQ(g.exit_code, 0) << g.err;
    std::istringstream in(g.out);
    std::string completions;
    for (std::string line; std::getline(in, line);) {
      json record = json::parse(line);
      EXPECT_EQ(record["tokens"].size(), 8u) << line;
      completions += record["prompt"].get<std::string>() + "|" + record["tokens"].dump() + "\n";
    }
    outputs.push_back(completions);
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_EQ(std::count(outputs[0].begin(), outputs[0].end(), '\n'), 2) << outputs[0];
}

TEST_F(LanguageModelEndToEnd, AModelAndDatasetThatDoNotFitAreRefusedInOneLine) {
  const std::string samples = work_ + "/fashion";
  ASSERT_EQ(prepare_fashion(samples, 200).exit_code, 0);
  const auto refused = [](const std::string& command, int code, const std::string& words) {
    const ProcessResult r = run_command(command);
    EXPECT_EQ(r.exit_code, code) << command << "\n" << r.err;
    EXPECT_EQ(count_lines_with(r.err, "hpctrain: error:"), 1) << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << "expected '" << words << "' in\n" << r.err;
  };
  refused(kBin + " train --data.path=" + samples + " --model.name=gpt --run.dir=" + work_ + "/r1", 2,
          "model.name=gpt learns from a token stream");
  refused(kBin + " train --data.path=" + tokens_ + " --data.eval_split=val --run.dir=" + work_ + "/r2", 2,
          "is a token stream, which only model.name=gpt, llama and torchscript");
  refused(kBin + " train --data.path=" + tokens_ + " --data.eval_split=val --model.name=gpt --data.random_flip=true" +
              " --run.dir=" + work_ + "/r3",
          2, "data.random_crop and data.random_flip augment images");
  refused(kBin + " train --data.path=" + tokens_ + " --data.eval_split=val --model.name=gpt" +
              " --model.gpt_block_size=100000 --run.dir=" + work_ + "/r4",
          3, "lower model.gpt_block_size");
  refused(kBin + " train --data.path=" + tokens_ + " --data.eval_split=val --model.name=torchscript --model.path=" +
              work_ + "/scripted-lm-100.pt --model.gpt_block_size=32 --run.dir=" + work_ + "/r5",
          2, "forward returns [2, 32, 100]; it must return logits [2, 32, 256] for a batch [2, 32] of int64 token ids "
             "(the dataset has 256 tokens in its vocabulary)");
  EXPECT_FALSE(std::filesystem::exists(work_ + "/r1")) << "a refused run leaves no run directory";
}

TEST_F(LanguageModelEndToEnd, DoctorReadsATokenStream) {
  const ProcessResult r = run_command(mpirun(2) + kBin + " doctor --data.path=" + tokens_ +
                                      " --data.eval_split=val --model.name=gpt --model.gpt_block_size=32 --run.dir=" +
                                      work_ + "/doctor-run --size-mb 1");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(" tokens), val ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("doctor: 6 checks passed"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace hpctrain::testing
