// Fine-tuning from pretrained weights end to end: a GPT-2 made by the Python reference
// (tests/support/gpt2_reference.py: Hugging Face's names, Conv1D layout, tanh GELU) is imported
// from safetensors and torch.save files with the logits of the Python module; a run starts from
// it at ZeRO stages 0 and 3, and its exports load back into Python strictly with the same logits;
// a resume takes its weights from the checkpoint, not model.init_from; bad files and weights that
// do not fit are refused in one line before anything is written.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "e2e.h"
#include "hpctrain/core/system.h"
#include "hpctrain/model/model.h"
#include "hpctrain/weights/init_from.h"
#include "hpctrain/weights/weight_file.h"
#include "process.h"
#include "same_checkpoints.h"

namespace hpctrain::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kReference = "/usr/bin/python3 " + kSource + "/tests/support/gpt2_reference.py";

class PretrainedEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    work_ = make_temp_dir("pretrained");
    for (const auto& [dir, args] : {std::pair<std::string, std::string>{"gpt2", "--seed 1"},
                                    {"other", "--seed 2"},
                                    {"vocab300", "--vocab 300"}}) {
      fs::create_directories(work_ + "/" + dir);
      const ProcessResult made = run_command(kReference + " make " + work_ + "/" + dir + " " + args);
      ASSERT_EQ(made.exit_code, 0) << made.err;
    }
    const std::string text = work_ + "/text.txt";
    {
      std::ofstream out(text);
      for (int i = 0; i < 600; ++i) out << "a pretrained model reads line " << i % 53 << " of its text\n";
    }
    const ProcessResult r = run_command(kBin + " prepare text --source " + text + " --out " + work_ + "/tokens");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  // GPT-2's shape taken from the weights (0s); only the heads and the activation are given.
  static std::string train(int ranks, const std::string& run, const std::string& init, const std::string& extra) {
    return mpirun(ranks) + kBin + " train --data.path=" + work_ + "/tokens --data.eval_split=val" +
           " --model.name=gpt --model.init_from=" +
           init + " --model.gpt_layers=0 --model.gpt_embd=0 --model.gpt_block_size=0 --model.gpt_heads=2" +
           " --model.gpt_activation=gelu_tanh --model.dropout=0 --train.batch_size=4 --train.threads=1" +
           " --log.every_steps=1 --ckpt.keep_last=0 --run.dir=" + work_ + "/" + run + " " + extra;
  }
  // The largest relative difference of the Python module's logits, `file` loaded strictly.
  static double python_difference(const std::string& file, const std::string& layout) {
    const ProcessResult r = run_command(kReference + " check " + file + " --expected " + work_ +
                                        "/gpt2/expected.safetensors --layout " + layout + " --heads 2");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? json::parse(r.out)["max_relative_difference"].get<double>() : 1.0;
  }

  static std::string work_;
};

std::string PretrainedEndToEnd::work_;

// hpctrain's gpt on the imported weights against the Python module's logits on the same tokens.
double hpctrain_difference(const std::string& path) {
  config::ModelConfig config;
  config.name = config::ModelName::kGpt;
  config.gpt_layers = config.gpt_embd = config.gpt_block_size = 0;
  config.gpt_heads = 2;
  config.gpt_activation = config::GptActivation::kGeluTanh;
  config.dropout = 0;
  const weights::WeightFile file = weights::WeightFile::open(path);
  const weights::MappedWeights mapped = weights::map_weights(config, file);
  std::int64_t vocabulary = 0;
  weights::fill_gpt_shape(config, mapped.tensors, vocabulary);
  const auto model = model::make_model(config, {{config.gpt_block_size}, vocabulary, true});
  weights::load_weights(*model, mapped, /*strict=*/true, path);
  model->module().eval();
  const weights::WeightFile expected = weights::WeightFile::open(fs::path(path).parent_path() / "expected.safetensors");
  std::map<std::string, at::Tensor> named(expected.tensors().begin(), expected.tensors().end());
  const at::Tensor logits = model->forward(named.at("tokens"));
  const at::Tensor& reference = named.at("logits");
  return ((logits - reference).abs().max() / reference.abs().max()).item<double>();
}

TEST_F(PretrainedEndToEnd, ImportedWeightsGiveThePythonModulesLogits) {
  // GPT2Model's names with the causal masks; GPT2LMHeadModel's state_dict through torch.save.
  EXPECT_LE(hpctrain_difference(work_ + "/gpt2/gpt2.safetensors"), 1e-5);
  EXPECT_LE(hpctrain_difference(work_ + "/gpt2/gpt2.pt"), 1e-5);
  // Half precisions: the weights rounded, so only near.
  EXPECT_LE(hpctrain_difference(work_ + "/gpt2/gpt2_f16.safetensors"), 1e-2);
  EXPECT_LE(hpctrain_difference(work_ + "/gpt2/gpt2_bf16.safetensors"), 5e-2);
}

TEST_F(PretrainedEndToEnd, RunsStartFromTheWeightsAtStagesZeroAndThreeAndExportForPython) {
  for (const int stage : {0, 3}) {
    const std::string run = "stage" + std::to_string(stage);
    // A learning rate so small that the weights stay the imported ones to float32's precision.
    const ProcessResult r = run_command(train(2, run, work_ + "/gpt2/gpt2.safetensors",
                                              "--train.max_steps=2 --optim.lr=1e-10 --dist.zero_stage=" +
                                                  std::to_string(stage)));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_GE(count_lines_with(r.err, " loaded from " + work_ + "/gpt2/gpt2.safetensors (hf-gpt2 names)"), 1)
        << r.err;
    const std::string checkpoint = work_ + "/" + run + "/checkpoints/ckpt-2.h5";
    const std::string hf = work_ + "/" + run + "/hf.safetensors";
    const std::string ours = work_ + "/" + run + "/ours.pt";
    const ProcessResult e1 =
        run_command(kBin + " ckpt export " + checkpoint + " --format safetensors --names hf-gpt2 --out " + hf);
    ASSERT_EQ(e1.exit_code, 0) << e1.err;
    const ProcessResult e2 = run_command(kBin + " ckpt export " + checkpoint + " --format pytorch --out " + ours);
    ASSERT_EQ(e2.exit_code, 0) << e2.err;
    // Evaluation reads the run's config, whose gpt shape is now written out, and the checkpoint.
    const ProcessResult e3 =
        run_command(kBin + " eval --checkpoint " + checkpoint + " --config " + work_ + "/" + run + "/config.ini");
    EXPECT_EQ(e3.exit_code, 0) << e3.err;
    EXPECT_EQ(count_lines_with(e3.err, "model.init_from"), 0) << e3.err;
    EXPECT_LE(python_difference(hf, "hf"), 1e-5) << "stage " << stage;
    EXPECT_LE(python_difference(ours, "hpctrain"), 1e-5) << "stage " << stage;
    // The export reads back into exactly the checkpoint's tensors.
    const weights::WeightFile exported = weights::WeightFile::open(hf);
    config::ModelConfig gpt;
    gpt.name = config::ModelName::kGpt;
    const weights::MappedWeights mapped = weights::map_weights(gpt, exported);
    const ckpt::NamedTensors stored = ckpt::CheckpointReader(checkpoint).read_group("model");
    ASSERT_EQ(mapped.tensors.size(), stored.size());
    for (size_t i = 0; i < stored.size(); ++i) {
      EXPECT_EQ(mapped.tensors[i].first, stored[i].first);
      EXPECT_TRUE(at::equal(mapped.tensors[i].second, stored[i].second)) << stored[i].first;
    }
  }
}

TEST_F(PretrainedEndToEnd, AResumeTakesItsWeightsFromTheCheckpoint) {
  const std::string first = work_ + "/gpt2/gpt2.safetensors";
  const ProcessResult whole = run_command(train(2, "whole", first, "--train.max_steps=4 --ckpt.every_steps=2"));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const ProcessResult part = run_command(train(2, "parts", first, "--train.max_steps=2 --ckpt.every_steps=2"));
  ASSERT_EQ(part.exit_code, 0) << part.err;
  // Other weights named now: the checkpoint's win.
  const ProcessResult rest =
      run_command(train(2, "parts", work_ + "/other/gpt2.pt", "--train.max_steps=4 --ckpt.every_steps=2"));
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_GE(count_lines_with(rest.err, "resumed from " + work_ + "/parts/checkpoints/ckpt-2.h5: step 2"), 1)
      << rest.err;
  expect_same_tensors(work_ + "/whole/checkpoints/ckpt-4.h5", work_ + "/parts/checkpoints/ckpt-4.h5",
                      {"model", "optim"});
}

// The JSON lines of a generate run, without their timings.
std::vector<json> generated(const ProcessResult& r) {
  std::vector<json> records;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    records.push_back(json::parse(line));
    records.back().erase("tokens_per_s");
  }
  return records;
}

TEST_F(PretrainedEndToEnd, GreedyGenerationIsThePythonModulesWithAndWithoutTheCacheAndInABatch) {
  const std::string config = work_ + "/generate.ini";
  std::ofstream(config) << "[model]\nname = gpt\ngpt_layers = 0\ngpt_embd = 0\ngpt_block_size = 0\ngpt_heads = 2\n"
                           "gpt_activation = gelu_tanh\ndropout = 0\n";
  // 40 new tokens after 5: past the 32 positions, where the context is cut to its last 32.
  const ProcessResult python =
      run_command(kReference + " greedy " + work_ + "/gpt2/gpt2.pt --prompt hello --new 40 --heads 2");
  ASSERT_EQ(python.exit_code, 0) << python.err;
  const json expected = json::parse(python.out);
  for (const std::string cache : {"", " --no-kv-cache"}) {
    const ProcessResult r = run_command(kBin + " generate --weights " + work_ + "/gpt2/gpt2.safetensors --config " +
                                        config + " --tokenizer bytes --prompt hello --max-new-tokens 40" +
                                        " --temperature 0" + cache);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::vector<json> records = generated(r);
    ASSERT_EQ(records.size(), 1u) << r.out;
    EXPECT_EQ(records[0]["prompt"], "hello");
    EXPECT_EQ(records[0]["tokens"], expected) << cache;
  }
  // Three copies as one batch: each row continues as the prompt alone does.
  const std::string prompts = work_ + "/hello3.txt";
  std::ofstream(prompts) << "hello\nhello\nhello\n";
  const ProcessResult batched = run_command(kBin + " generate --weights " + work_ + "/gpt2/gpt2.safetensors --config " +
                                            config + " --tokenizer bytes --prompts " + prompts +
                                            " --batch-size 3 --max-new-tokens 40 --temperature 0");
  ASSERT_EQ(batched.exit_code, 0) << batched.err;
  const std::vector<json> rows = generated(batched);
  ASSERT_EQ(rows.size(), 3u) << batched.out;
  for (const json& row : rows) EXPECT_EQ(row["tokens"], expected);

  // Weights of another vocabulary than the tokenizer's: one line.
  const ProcessResult other = run_command(kBin + " generate --weights " + work_ + "/vocab300/gpt2.safetensors --config " +
                                          config + " --tokenizer bytes --prompt hello");
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_NE(other.err.find("has a vocabulary of 300 tokens, the tokenizer 256"), std::string::npos) << other.err;
}

TEST_F(PretrainedEndToEnd, SamplingIsReproducibleAtAnyRankCountFromACheckpoint) {
  const ProcessResult trained = run_command(train(1, "sampled", work_ + "/gpt2/gpt2.safetensors", "--train.max_steps=2"));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string prompts = work_ + "/prompts.txt";
  std::ofstream(prompts) << "a pretrained\n\nmodel reads\nline 7\n";
  std::vector<std::vector<json>> runs;
  for (const int ranks : {1, 2, 3}) {
    const ProcessResult r = run_command(mpirun(ranks) + kBin + " generate --checkpoint " + work_ +
                                        "/sampled/checkpoints/ckpt-2.h5 --prompts " + prompts +
                                        " --max-new-tokens 12 --temperature 0.9 --top-k 40 --top-p 0.95 --seed 7");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    runs.push_back(generated(r));
    ASSERT_EQ(runs.back().size(), 3u) << r.out;
    EXPECT_EQ(runs.back()[2]["prompt"], "line 7");
    EXPECT_EQ(runs.back()[2]["tokens"].size(), 12u);
  }
  EXPECT_EQ(runs[1], runs[0]);
  EXPECT_EQ(runs[2], runs[0]);
  EXPECT_NE(runs[0][0]["tokens"], runs[0][1]["tokens"]) << "two prompts drew the same tokens";
}

// The first training record's loss of a run.
double first_loss(const std::string& run) {
  for (const json& record : read_jsonl(run + "/metrics.jsonl")) {
    if (record.contains("step_ms")) return record["loss"].get<double>();
  }
  ADD_FAILURE() << run << " has no training record";
  return 0;
}

// `text` without its lines containing `needle`.
std::string without_lines(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) == std::string::npos) out += line + "\n";
  }
  return out;
}

// Hugging Face GPT-2's names make a model with GPT-2's tanh GELU unless model.gpt_activation is
// given: through train (the first step's loss is the tanh model's, the resolved config says so),
// eval and generate (each logs the choice).
TEST_F(PretrainedEndToEnd, GptTwosNamesImplyItsActivationUnlessOneIsGiven) {
  const std::string weights = work_ + "/gpt2/gpt2.safetensors";
  const std::string given = " --model.gpt_activation=gelu_tanh";
  const auto run = [&](const std::string& name, const std::string& activation) {
    std::string command = train(1, name, weights, "--train.max_steps=1 --optim.lr=1e-10 " + activation);
    command.erase(command.find(given), given.size());
    return run_command(command);
  };
  const ProcessResult implied = run("implied", "");
  const ProcessResult tanh = run("tanh", "--model.gpt_activation=gelu_tanh");
  const ProcessResult exact = run("exact", "--model.gpt_activation=gelu");
  ASSERT_EQ(implied.exit_code, 0) << implied.err;
  ASSERT_EQ(tanh.exit_code, 0) << tanh.err;
  ASSERT_EQ(exact.exit_code, 0) << exact.err;
  EXPECT_NE(implied.err.find("model.gpt_activation: gelu_tanh (Hugging Face GPT-2's weights"), std::string::npos)
      << implied.err;
  EXPECT_NE(exact.err.find("model.gpt_activation=gelu as given, though Hugging Face GPT-2's weights were trained "
                           "with gelu_tanh"),
            std::string::npos)
      << exact.err;
  EXPECT_EQ(first_loss(work_ + "/implied"), first_loss(work_ + "/tanh"));
  EXPECT_NE(first_loss(work_ + "/exact"), first_loss(work_ + "/tanh"));
  const std::string resolved = read_file(work_ + "/implied/config.ini");
  EXPECT_NE(resolved.find("gpt_activation = gelu_tanh\n"), std::string::npos) << resolved;

  // eval with a config that names the weights but not the activation.
  const std::string eval_config = work_ + "/eval-implied.ini";
  std::ofstream(eval_config) << without_lines(resolved, "gpt_activation");
  const ProcessResult evaluated = run_command(kBin + " eval --checkpoint " + work_ +
                                              "/implied/checkpoints/ckpt-1.h5 --config " + eval_config);
  EXPECT_EQ(evaluated.exit_code, 0) << evaluated.err;
  EXPECT_NE(evaluated.err.find("model.gpt_activation: gelu_tanh"), std::string::npos) << evaluated.err;

  // generate --weights with such a config continues as the Python module (tanh GELU) does.
  const std::string config = work_ + "/generate-implied.ini";
  std::ofstream(config) << "[model]\nname = gpt\ngpt_layers = 0\ngpt_embd = 0\ngpt_block_size = 0\ngpt_heads = 2\n"
                           "dropout = 0\n";
  const ProcessResult python =
      run_command(kReference + " greedy " + work_ + "/gpt2/gpt2.pt --prompt hello --new 20 --heads 2");
  ASSERT_EQ(python.exit_code, 0) << python.err;
  const ProcessResult generated_run = run_command(kBin + " generate --weights " + weights + " --config " + config +
                                                  " --tokenizer bytes --prompt hello --max-new-tokens 20 --temperature 0");
  ASSERT_EQ(generated_run.exit_code, 0) << generated_run.err;
  EXPECT_NE(generated_run.err.find("model.gpt_activation: gelu_tanh"), std::string::npos) << generated_run.err;
  const std::vector<json> records = generated(generated_run);
  ASSERT_EQ(records.size(), 1u) << generated_run.out;
  EXPECT_EQ(records[0]["tokens"], json::parse(python.out));
}

TEST_F(PretrainedEndToEnd, BadWeightsAreOneLineAndWriteNothing) {
  const std::string truncated = work_ + "/truncated.safetensors";
  {
    const std::string bytes = read_file(work_ + "/gpt2/gpt2.safetensors");
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  struct Case {
    std::string init;
    std::string extra;
    int exit_code;
    std::string says;
  };
  const std::vector<Case> cases{
      {truncated, "", 4, "(a truncated file, or offsets outside it)"},
      {work_ + "/absent.safetensors", "", 4, "cannot open the weights file"},
      {work_ + "/text.txt", "", 4, "not a weights file hpctrain reads"},
      {work_ + "/gpt2/gpt2.safetensors", "--model.gpt_embd=64", 2,
       "transformer.wte.weight (file [256, 32] Float, model [256, 64] Float)"},
      {work_ + "/vocab300/gpt2.safetensors", "", 2, "has a vocabulary of 300 tokens"},
  };
  for (const Case& c : cases) {
    const ProcessResult r = run_command(train(1, "refused", c.init, "--train.max_steps=1 " + c.extra));
    EXPECT_EQ(r.exit_code, c.exit_code) << c.init << ": " << r.err;
    EXPECT_EQ(count_lines_with(r.err, "hpctrain: error: "), 1) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(work_ + "/refused")) << c.init;
  }
}

}  // namespace
}  // namespace hpctrain::testing
