// model.name=torchscript through the real executable: a CNN scripted and saved by Debian's
// PyTorch (tests/support/export_torchscript.py) trains at -np 2, stops and resumes bit-identically
// (BatchNorm buffers and dropout included), evaluates to the loss PyTorch computes from the
// exported state_dict (which loads into the Python module by its own names), keeps frozen
// parameters frozen; modules that do not fit are refused in one line.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "e2e.h"
#include "process.h"
#include "same_checkpoints.h"
#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/core/system.h"
#include "hpctrain/model/model.h"

namespace hpctrain::testing {
namespace {

using json = nlohmann::json;

const std::string kExporter = "/usr/bin/python3 " + kSource + "/tests/support/export_torchscript.py";

// A checkpoint's model tensors by name.
std::map<std::string, at::Tensor> model_group(const std::string& checkpoint) {
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, tensor] : ckpt::CheckpointReader(checkpoint).read_group("model")) tensors[name] = tensor;
  return tensors;
}

class TorchScriptEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const FashionSuite suite = make_fashion_suite("torchscript", 1200, 2);
    work_ = suite.work;
    data_ = suite.data;
    for (const auto& [file, options] : std::vector<std::pair<std::string, std::string>>{
             {"model.pt", ""}, {"seven.pt", "--classes 7"}, {"three-channels.pt", "--channels 3"},
             {"tied.pt", "--tied"}, {"tied-other.pt", "--tied --seed 1"}, {"frozen.pt", "--freeze features.0"}}) {
      const ProcessResult exported = run_command(kExporter + " " + work_ + "/" + file + " " + options);
      ASSERT_EQ(exported.exit_code, 0) << exported.out << exported.err;
    }
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  static std::string train(int ranks, const std::string& run, const std::string& extra) {
    return mpirun(ranks) + kBin + " train --data.path=" + data_ + " --model.name=torchscript --model.path=" + work_ +
           "/model.pt --run.dir=" + work_ + "/" + run + " --train.threads=1 --data.eval_split= --train.batch_size=32" +
           " --optim.name=adamw --optim.lr=0.003 --log.every_steps=3 --ckpt.keep_last=0 " + extra;
  }

  // `hpctrain eval` of `checkpoint` on the test split, and the loss PyTorch computes with the
  // state_dict `ckpt export` writes from it, loaded strictly into the Python module
  // (export_torchscript.py `python_flags`): the same, and the state_dict holds `tensors` tensors.
  static void expect_python_agrees(const std::string& checkpoint, const std::string& config,
                                   const std::string& python_flags, int tensors, const std::string& export_flags = "") {
    const ProcessResult evaluated =
        run_command(kBin + " eval --checkpoint " + checkpoint + " --config " + config + " --data.eval_split=test");
    ASSERT_EQ(evaluated.exit_code, 0) << evaluated.err;
    const std::string label = "test: 1200 samples, test_loss ";
    const size_t at = evaluated.err.find(label);
    ASSERT_NE(at, std::string::npos) << evaluated.err;
    const std::string run = std::filesystem::path(checkpoint).parent_path().parent_path().filename().string();
    const std::string state_dict = work_ + "/" + run + "-state_dict.pt";
    ASSERT_EQ(run_command(kBin + " ckpt export " + checkpoint + " --to state_dict --out " + state_dict + export_flags).exit_code,
              0);
    const ProcessResult loaded = run_command(kExporter + " " + python_flags + " --check-state-dict " + state_dict +
                                             " --source " + kFashionMnist + " --manifest " +
                                             data_ + "/manifest.json --limit 1200");
    ASSERT_EQ(loaded.exit_code, 0) << loaded.out << loaded.err;
    const json python = json::parse(loaded.out);
    EXPECT_EQ(python["tensors"], tensors);
    EXPECT_NEAR(python["test_loss"].get<double>(), std::stod(evaluated.err.substr(at + label.size())), 1e-4)
        << loaded.out << evaluated.err;
  }

  static std::string work_;
  static std::string data_;
};

std::string TorchScriptEndToEnd::work_;
std::string TorchScriptEndToEnd::data_;

TEST_F(TorchScriptEndToEnd, TrainsResumesBitIdenticallyAndExportsTheModulesOwnNames) {
  const ProcessResult whole = run_command(train(2, "whole", "--train.max_steps=12"));
  ASSERT_EQ(whole.exit_code, 0) << whole.out << whole.err;
  EXPECT_EQ(count_lines_with(whole.err, "model torchscript: "), 1) << whole.err;
  std::vector<double> losses;
  std::istringstream records(read_file(work_ + "/whole/metrics.jsonl"));
  for (std::string line; std::getline(records, line);) {
    const json record = json::parse(line);
    if (record.contains("loss")) losses.push_back(record["loss"].get<double>());
  }
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_LT(losses.back(), losses.front()) << "the loss did not fall";

  ASSERT_EQ(run_command(train(2, "split", "--train.max_steps=6")).exit_code, 0);
  const ProcessResult resumed = run_command(train(2, "split", "--train.max_steps=12"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(count_lines_with(resumed.err, "resumed from "), 1) << resumed.err;
  const std::string a = work_ + "/whole/checkpoints/ckpt-12.h5";
  const std::string b = work_ + "/split/checkpoints/ckpt-12.h5";
  expect_same_tensors(a, b, {"model", "optim"});
  // The BatchNorm statistics are among the model's tensors, under the Python module's names.
  bool running_mean = false;
  for (const auto& [name, tensor] : ckpt::CheckpointReader(a).read_group("model")) {
    running_mean = running_mean || name == "features.1.running_mean";
  }
  EXPECT_TRUE(running_mean);

  // Evaluated in eval mode (BatchNorm's running statistics, no dropout) to the loss PyTorch computes
  // with the exported state_dict in the Python module.
  expect_python_agrees(a, work_ + "/whole/config.ini", "", 16);
}

TEST_F(TorchScriptEndToEnd, FrozenParametersStayAsSaved) {
  const ProcessResult r = run_command(train(2, "frozen", "--train.max_steps=4 --ckpt.every_steps=2 --model.path=" +
                                                             work_ + "/frozen.pt --optim.weight_decay=0.1"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "(2 frozen tensors besides, of "), 1) << r.err;
  const auto at_2 = model_group(work_ + "/frozen/checkpoints/ckpt-2.h5");
  for (const auto& [name, tensor] : model_group(work_ + "/frozen/checkpoints/ckpt-4.h5")) {
    if (name == "features.0.weight" || name == "features.0.bias") {
      EXPECT_TRUE(at::equal(tensor, at_2.at(name))) << name << " changed although frozen";
    }
    if (name == "features.4.weight") {
      EXPECT_FALSE(at::equal(tensor, at_2.at(name))) << name << " did not learn";
    }
  }
}

// One weight under two names (second.weight = first.weight): trained once, stored under both, so
// the exported state_dict loads strictly into the Python module and gives hpctrain's test loss.
// dist.zero_stage shards what learns and leaves frozen parameters alone: at -np 2 stage 2 trains
// the module with a frozen first layer exactly as stage 0 does.
TEST_F(TorchScriptEndToEnd, StageTwoTrainsAModuleWithFrozenParametersAsStageZeroDoes) {
  for (const char* stage : {"0", "2"}) {
    const ProcessResult r = run_command(train(2, std::string("frozen-stage") + stage,
                                              "--train.max_steps=12 --model.path=" + work_ +
                                                  "/frozen.pt --dist.zero_stage=" + stage));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  expect_same_tensors(work_ + "/frozen-stage0/checkpoints/ckpt-12.h5", work_ + "/frozen-stage2/checkpoints/ckpt-12.h5",
                      {"model", "optim"});
}

TEST_F(TorchScriptEndToEnd, TiedWeightsTrainOnceAndExportUnderBothNames) {
  const ProcessResult r = run_command(train(2, "tied", "--train.max_steps=4 --ckpt.every_steps=2 --model.path=" +
                                                           work_ + "/tied.pt"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "tied weights: 'second.weight' is 'first.weight' (trained once"), 1) << r.err;
  // embed 7850 + first 110 + second's bias 10: the shared weight is counted once.
  EXPECT_EQ(count_lines_with(r.err, "model torchscript: 7970 parameters in 5 tensors"), 1) << r.err;
  const auto at_2 = model_group(work_ + "/tied/checkpoints/ckpt-2.h5");
  auto at_4 = model_group(work_ + "/tied/checkpoints/ckpt-4.h5");
  ASSERT_EQ(at_4.count("first.weight") + at_4.count("second.weight"), 2u);
  EXPECT_TRUE(at::equal(at_4["first.weight"], at_4["second.weight"]));
  EXPECT_FALSE(at::equal(at_4["first.weight"], at_2.at("first.weight"))) << "the shared weight did not learn";

  expect_python_agrees(work_ + "/tied/checkpoints/ckpt-4.h5", work_ + "/tied/config.ini", "--tied", 6);
}

// LoRA on a scripted module (src/model/scripted_lora.h): adapters on `embed` and on the weight
// `first` and `second` share (named by its second name); only they learn, they start as the base,
// they are folded into both uses of the tied weight, the merged export evaluates in PyTorch to the
// loss hpctrain evaluates with the adapters, and another base is refused on resume.
TEST_F(TorchScriptEndToEnd, LoraAdaptersLearnAloneAndMergeIntoTheModulesOwnWeights) {
  const std::string lora = " --model.lora_rank=4 --model.lora_alpha=8 --model.lora_targets=embed,second";
  config::ModelConfig config;
  config.name = config::ModelName::kTorchscript;
  config.path = work_ + "/tied.pt";
  const model::ModelSpec spec{{1, 28, 28}, 10};
  const auto base = model::make_model(config, spec);
  config.lora_rank = 4;
  config.lora_targets = "embed,second";
  const auto adapted = model::make_model(config, spec);
  base->module().eval();
  adapted->module().eval();
  const at::Tensor images = at::randn({3, 1, 28, 28});
  EXPECT_TRUE(at::equal(base->forward(images), adapted->forward(images))) << "step 0 is not the base";

  const ProcessResult r = run_command(train(2, "tied-lora", "--train.max_steps=4 --ckpt.every_steps=2 --model.path=" +
                                                                work_ + "/tied.pt" + lora));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "(5 frozen tensors besides, of "), 1) << r.err;
  const auto at_2 = model_group(work_ + "/tied-lora/checkpoints/ckpt-2.h5");
  const auto at_4 = model_group(work_ + "/tied-lora/checkpoints/ckpt-4.h5");
  std::set<std::string> names;
  for (const auto& [name, tensor] : at_4) names.insert(name);
  EXPECT_EQ(names, (std::set<std::string>{"embed.lora_A.weight", "embed.lora_B.weight", "first.lora_A.weight",
                                          "first.lora_B.weight"}));
  EXPECT_FALSE(at::equal(at_4.at("first.lora_B.weight"), at_2.at("first.lora_B.weight"))) << "B did not learn";
  EXPECT_GT(at_4.at("first.lora_B.weight").abs().max().item<float>(), 0.0f);
  std::set<std::string> checksummed;
  for (const auto& [name, value] : ckpt::CheckpointReader(work_ + "/tied-lora/checkpoints/ckpt-4.h5").read_group("base")) {
    checksummed.insert(name);
  }
  EXPECT_EQ(checksummed.count("first.weight") + checksummed.count("embed.weight"), 2u);

  // eval folds the adapters in; PyTorch computes with the merged state_dict (second.weight too).
  expect_python_agrees(work_ + "/tied-lora/checkpoints/ckpt-4.h5", work_ + "/tied-lora/config.ini", "--tied", 6,
                       " --merge");

  const ProcessResult other = run_command(train(2, "tied-lora", "--train.max_steps=6 --ckpt.every_steps=2 "
                                                               "--ckpt.allow_config_change=true --model.path=" + work_ + "/tied-other.pt" + lora));
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_EQ(count_lines_with(other.err, "is not the one the adapters of"), 1) << other.err;
  EXPECT_NE(other.err.find("(model.path=" + work_ + "/tied-other.pt)"), std::string::npos) << other.err;
}

TEST_F(TorchScriptEndToEnd, LoraOptionsAScriptedModuleCannotTakeAreRefusedInOneLine) {
  const std::string base = kBin + " train --data.path=" + data_ + " --model.name=torchscript --model.path=" + work_ +
                           "/model.pt --run.dir=" + work_ + "/refused-lora --model.lora_rank=4";
  for (const auto& [extra, words] : std::vector<std::pair<std::string, std::string>>{
           {" --model.lora_targets=nothing", "'nothing' names no module with a 2-d weight in model.path="},
           {" --model.lora_targets=features.*", "'features.*' names no module with a 2-d weight"},
           {" --model.lora_targets=head --model.lora_rank=11", "model.lora_rank=11 is larger than layer head"},
           {" --model.lora_targets=head --model.lora_dropout=0.1", "leaves no adapter input to drop"},
           {" --model.lora_targets=head --model.lora_base_dtype=bf16", "model.lora_base_dtype=bf16: a TorchScript"}}) {
    const ProcessResult r = run_command(base + extra);
    EXPECT_EQ(r.exit_code, 2) << extra << "\n" << r.err;
    EXPECT_EQ(count_lines_with(r.err, "hpctrain: error:"), 1) << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << "expected '" << words << "' in\n" << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(work_ + "/refused-lora")) << "a refused run leaves no run directory";
}

TEST_F(TorchScriptEndToEnd, ModulesThatDoNotFitAreRefusedInOneLine) {
  const std::string text = work_ + "/not-a-module.pt";
  std::ofstream(text) << "not TorchScript";
  const std::string base = kBin + " train --data.path=" + data_ + " --model.name=torchscript --run.dir=" + work_ + "/r";
  for (const auto& [extra, words] : std::vector<std::pair<std::string, std::string>>{
           {"", "model.name=torchscript needs model.path=FILE.pt"},
           {" --model.path=" + work_ + "/missing.pt", "missing.pt: no such file"},
           {" --model.path=" + text, "is not a TorchScript file this libtorch can load"},
           {" --model.path=" + work_ + "/seven.pt", "forward returns [2, 7]; it must return logits [2, 10]"},
           {" --model.path=" + work_ + "/three-channels.pt", "forward fails on [2, 1, 28, 28] samples ("}}) {
    const ProcessResult r = run_command(base + extra);
    EXPECT_EQ(r.exit_code, 2) << extra << "\n" << r.err;
    EXPECT_EQ(count_lines_with(r.err, "hpctrain: error:"), 1) << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << "expected '" << words << "' in\n" << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(work_ + "/r")) << "a refused run leaves no run directory";
}

}  // namespace
}  // namespace hpctrain::testing
