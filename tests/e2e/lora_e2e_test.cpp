// LoRA fine-tuning end to end: a gpt pretrained by hpctrain is the base (model.init_from) of runs
// that train adapters alone. The same 50 steps agree at 1, 2 and 4 ranks and at every ZeRO stage;
// the checkpoints hold the adapters and the base's checksums, which still match the base file
// after training; a stopped run resumes to the bit and refuses another base; the adapters export
// in PEFT's layout and merged into the base, which generates what the adapted checkpoint does; a
// bf16 copy of the base trains, resumes and merges.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "e2e.h"
#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/core/system.h"
#include "hpctrain/io/fletcher32.h"
#include "hpctrain/weights/weight_file.h"
#include "process.h"
#include "same_checkpoints.h"

namespace hpctrain::testing {
namespace {

using json = nlohmann::json;

const std::string kShape = " --model.name=gpt --model.gpt_layers=2 --model.gpt_heads=2 --model.gpt_embd=32"
                           " --model.gpt_block_size=32 --model.dropout=0";

class LoraEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    work_ = make_temp_dir("lora");
    for (const auto& [name, phrase] : {std::pair<std::string, std::string>{"base", "the quick brown fox jumps"},
                                       {"tune", "a lazy dog sleeps all day"}}) {
      const std::string text = work_ + "/" + name + ".txt";
      {
        std::ofstream out(text);
        for (int i = 0; i < 1500; ++i) out << phrase << " " << i % 89 << " times over\n";
      }
      const ProcessResult r = run_command(kBin + " prepare text --source " + text + " --out " + work_ + "/" + name);
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    // The base: 20 steps of full training on the first text; another, 10 steps.
    const std::string pretrain = kBin + " train --data.path=" + work_ + "/base --data.eval_split=" + kShape +
                                 " --train.batch_size=8 --train.threads=1 --optim.lr=0.003 --ckpt.every_steps=10" +
                                 " --ckpt.keep_last=0";
    const ProcessResult r = run_command(pretrain + " --train.max_steps=20 --run.dir=" + work_ + "/pretrain");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    base_ = work_ + "/pretrain/checkpoints/ckpt-20.h5";
    other_base_ = work_ + "/pretrain/checkpoints/ckpt-10.h5";
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  // 50 steps of adapters of rank 4 on attn and mlp.c_fc, a global batch of 24 at any world size.
  static std::string lora(int ranks, const std::string& run, const std::string& extra) {
    return mpirun(ranks) + kBin + " train --data.path=" + work_ + "/tune --data.eval_split=" + kShape +
           " --model.init_from=" + base_ + " --model.lora_rank=4 --model.lora_alpha=8 --model.lora_targets=attn,fc" +
           " --train.batch_size=6 --train.global_batch=24 --train.threads=1 --optim.lr=0.01" +
           " --train.epochs=10 --train.max_steps=50 --log.every_steps=10 --ckpt.keep_last=0 --run.dir=" +
           work_ + "/" + run + " " + extra;
  }
  static std::string checkpoint(const std::string& run, int step) {
    return work_ + "/" + run + "/checkpoints/ckpt-" + std::to_string(step) + ".h5";
  }

  // The training loss of run `run`'s last record.
  static double last_loss(const std::string& run) { return losses(run).back(); }
  static std::vector<double> losses(const std::string& run) {
    std::vector<double> out;
    std::ifstream in(work_ + "/" + run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const json record = json::parse(line);
      if (record.contains("loss")) out.push_back(record["loss"].get<double>());
    }
    EXPECT_FALSE(out.empty()) << run;
    if (out.empty()) out.push_back(0);
    return out;
  }

  static std::string work_;
  static std::string base_;
  static std::string other_base_;
};

std::string LoraEndToEnd::work_;
std::string LoraEndToEnd::base_;
std::string LoraEndToEnd::other_base_;

TEST_F(LoraEndToEnd, AdaptersAloneTrainAlikeAtEveryWorldSizeAndStage) {
  const ProcessResult two = run_command(lora(2, "w2", ""));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(count_lines_with(two.err, "(28 frozen tensors besides, of "), 1) << two.err;

  // The checkpoint holds the 8 adapters alone, and the checksums of a base that training left as
  // the file has it.
  const ckpt::CheckpointReader reader(checkpoint("w2", 50));
  const ckpt::NamedTensors adapters = reader.read_group("model");
  ASSERT_EQ(adapters.size(), 8u);
  for (const auto& [name, tensor] : adapters) EXPECT_NE(name.find(".lora_"), std::string::npos) << name;
  std::map<std::string, std::int64_t> stored;
  for (const auto& [name, value] : reader.read_group("base")) stored[name] = value.item<std::int64_t>();
  const ckpt::NamedTensors base = ckpt::CheckpointReader(base_).read_group("model");
  std::size_t checked = 0;
  for (const auto& [name, tensor] : base) {
    if (name == "lm_head.weight") continue;  // the tied head's second name
    const at::Tensor bytes = tensor.contiguous();
    ASSERT_EQ(stored.count(name), 1u) << name;
    EXPECT_EQ(stored.at(name), static_cast<std::int64_t>(io::fletcher32(bytes.data_ptr(), bytes.nbytes()))) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 28u);

  // Other world sizes add the same gradients in another order.
  for (const int ranks : {1, 4}) {
    const std::string run = "w" + std::to_string(ranks);
    const ProcessResult r = run_command(lora(ranks, run, ""));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_LT(relative_difference(checkpoint("w2", 50), checkpoint(run, 50), "model"), 1e-5) << run;
  }
  // At 2 ranks a reduce-scatter adds what an allreduce adds: every stage to the bit.
  for (const int stage : {1, 2, 3}) {
    const std::string run = "s" + std::to_string(stage);
    const ProcessResult r = run_command(lora(2, run, "--dist.zero_stage=" + std::to_string(stage)));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_tensors(checkpoint("w2", 50), checkpoint(run, 50), {"model", "optim", "sched", "base"});
  }
}

TEST_F(LoraEndToEnd, ResumesToTheBitAndRefusesAnotherBase) {
  const ProcessResult whole = run_command(lora(2, "whole", "--dist.check_replicas_every=5"));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const ProcessResult first = run_command(lora(2, "stopped", "--train.max_steps=25"));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const ProcessResult second = run_command(lora(2, "stopped", ""));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(count_lines_with(second.err, "resumed from "), 1) << second.err;
  expect_same_tensors(checkpoint("whole", 50), checkpoint("stopped", 50), {"model", "optim", "sched"});

  // Another base: refused in one line before a step is taken.
  const std::string resume_other = lora(2, "stopped", "--train.max_steps=60 --model.init_from=" + other_base_);
  const ProcessResult other = run_command(resume_other);
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_EQ(count_lines_with(other.err, "is not the one the adapters of"), 1) << other.err;
  EXPECT_FALSE(std::filesystem::exists(checkpoint("stopped", 60)));

  // Another world size continues.
  const ProcessResult four = run_command(lora(4, "stopped", "--train.max_steps=55"));
  ASSERT_EQ(four.exit_code, 0) << four.err;
  EXPECT_TRUE(std::filesystem::exists(checkpoint("stopped", 55)));
}

TEST_F(LoraEndToEnd, ExportsPeftAdaptersAndAMergedModelThatGeneratesAlike) {
  const ProcessResult trained = run_command(lora(1, "export", ""));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string source = checkpoint("export", 50);

  // The adapters in PEFT's names, with its adapter_config.json.
  const std::string peft = work_ + "/peft";
  std::filesystem::create_directories(peft);
  const ProcessResult adapters = run_command(kBin + " ckpt export " + source + " --format safetensors --names hf-gpt2" +
                                             " --out " + peft + "/adapter_model.safetensors");
  ASSERT_EQ(adapters.exit_code, 0) << adapters.err;
  const weights::WeightFile file = weights::WeightFile::open(peft + "/adapter_model.safetensors");
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& [name, tensor] : file.tensors()) shapes[name] = tensor.sizes().vec();
  EXPECT_EQ(shapes.size(), 8u);
  EXPECT_EQ(shapes["base_model.model.transformer.h.0.attn.c_attn.lora_A.weight"], (std::vector<std::int64_t>{4, 32}));
  EXPECT_EQ(shapes["base_model.model.transformer.h.1.mlp.c_fc.lora_B.weight"], (std::vector<std::int64_t>{128, 4}));
  const json config = json::parse(read_file(peft + "/adapter_config.json"));
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["lora_alpha"], 8.0);
  EXPECT_EQ(config["target_modules"], json({"attn.c_attn", "mlp.c_fc"}));
  EXPECT_EQ(config["base_model_name_or_path"], base_);

  // PEFT's own merge of that directory into the base in Hugging Face's layout (the Python
  // reference) gives hpctrain's merged export.
  const std::string base_hf = work_ + "/base_hf.safetensors";
  const std::string peft_merged = work_ + "/peft_merged.safetensors";
  const std::string ours_hf = work_ + "/merged_hf.safetensors";
  const std::string export_base = " ckpt export " + base_ + " --format safetensors --names hf-gpt2 --out ";
  ASSERT_EQ(run_command(kBin + export_base + base_hf).exit_code, 0);
  const ProcessResult reference = run_command("/usr/bin/python3 " + kSource + "/tests/support/gpt2_reference.py" +
                                              " peft-merge " + base_hf + " " + peft + " --out " + peft_merged);
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const ProcessResult ours =
      run_command(kBin + " ckpt export " + source + " --merge --format safetensors --names hf-gpt2 --out " + ours_hf);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  const weights::WeightFile expected = weights::WeightFile::open(peft_merged);
  const weights::WeightFile actual = weights::WeightFile::open(ours_hf);
  std::map<std::string, at::Tensor> merged_by_name(actual.tensors().begin(), actual.tensors().end());
  ASSERT_EQ(expected.tensors().size(), merged_by_name.size());
  for (const auto& [name, tensor] : expected.tensors()) {
    ASSERT_EQ(merged_by_name.count(name), 1u) << name;
    const double scale = std::max(tensor.abs().max().item<double>(), 1e-12);
    EXPECT_LE((merged_by_name.at(name) - tensor).abs().max().item<double>() / scale, 1e-6) << name;
  }

  // Merged into the base, the model continues a prompt as the adapted checkpoint does.
  const std::string merged = work_ + "/merged.safetensors";
  const ProcessResult merge =
      run_command(kBin + " ckpt export " + source + " --merge --format safetensors --out " + merged);
  ASSERT_EQ(merge.exit_code, 0) << merge.err;
  const std::string ini = work_ + "/merged.ini";
  std::ofstream(ini) << "[model]\nname = gpt\ngpt_layers = 2\ngpt_heads = 2\ngpt_embd = 32\ngpt_block_size = 32\n"
                     << "[data]\npath = " << work_ << "/tune\n";
  const std::string prompt = " --prompt 'a lazy dog' --max-new-tokens 20 --temperature 0 --out ";
  const ProcessResult adapted = run_command(kBin + " generate --checkpoint " + source + prompt + work_ + "/a.jsonl");
  ASSERT_EQ(adapted.exit_code, 0) << adapted.err;
  const ProcessResult folded =
      run_command(kBin + " generate --weights " + merged + " --config " + ini + prompt + work_ + "/m.jsonl");
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  const json a = json::parse(read_file(work_ + "/a.jsonl"));
  EXPECT_EQ(a["tokens"], json::parse(read_file(work_ + "/m.jsonl"))["tokens"]);
  EXPECT_EQ(a["tokens"].size(), 20u);

  // Evaluation reads the adapters onto the base.
  const ProcessResult eval = run_command(kBin + " eval --checkpoint " + source + " --data.path=" + work_ +
                                         "/tune --data.eval_split=val" + kShape + " --model.init_from=" + base_ +
                                         " --model.lora_rank=4 --model.lora_targets=attn,fc --train.threads=1");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_EQ(count_lines_with(eval.err, "test_ppl"), 1) << eval.err;

  // What cannot be merged is refused in one line.
  const ProcessResult plain = run_command(kBin + " ckpt export " + base_ + " --merge --out " + work_ + "/x.pt");
  EXPECT_EQ(plain.exit_code, 2) << plain.err;
  EXPECT_NE(plain.err.find("holds none (no /base group: not a model.lora_rank run)"), std::string::npos) << plain.err;
}

// model.lora_base_dtype=bf16: the base's matrices in bfloat16 on every rank, at stage 2, checked
// for replicas, stopped and resumed, also under bf16 autocast; it generates and merges (into
// float32 weights).
TEST_F(LoraEndToEnd, ABf16BaseTrainsResumesGeneratesAndMerges) {
  const std::string bf16 = "--model.lora_base_dtype=bf16 --dist.zero_stage=2 --dist.check_replicas_every=5";
  const ProcessResult whole = run_command(lora(2, "bf16", bf16));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const ProcessResult first = run_command(lora(2, "bf16-stopped", bf16 + " --train.max_steps=25"));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const ProcessResult second = run_command(lora(2, "bf16-stopped", bf16));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  expect_same_tensors(checkpoint("bf16", 50), checkpoint("bf16-stopped", 50), {"model", "optim", "sched", "base"});
  // On a rounded base the adapters learn otherwise than on a float32 base, to about the same loss.
  const ProcessResult full = run_command(lora(2, "f32", "--dist.zero_stage=2"));
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_GT(relative_difference(checkpoint("f32", 50), checkpoint("bf16", 50), "model"), 0.0);
  const double f32_loss = last_loss("f32");
  EXPECT_LT(last_loss("bf16"), f32_loss * 1.02);
  EXPECT_GT(last_loss("bf16"), f32_loss * 0.98);

  // Under bf16 autocast too.
  const ProcessResult autocast = run_command(lora(2, "bf16-autocast", bf16 + " --train.precision=bf16"));
  ASSERT_EQ(autocast.exit_code, 0) << autocast.err;
  EXPECT_EQ(count_lines_with(autocast.err, "done: 50 steps"), 1) << autocast.err;

  const ProcessResult generated = run_command(kBin + " generate --checkpoint " + checkpoint("bf16", 50) +
                                              " --prompt 'a lazy' --max-new-tokens 8 --temperature 0");
  ASSERT_EQ(generated.exit_code, 0) << generated.err;
  EXPECT_EQ(json::parse(generated.out)["tokens"].size(), 8u);
  const std::string merged = work_ + "/bf16-merged.safetensors";
  const ProcessResult merge =
      run_command(kBin + " ckpt export " + checkpoint("bf16", 50) + " --merge --format safetensors --out " + merged);
  ASSERT_EQ(merge.exit_code, 0) << merge.err;
  const weights::WeightFile merged_file = weights::WeightFile::open(merged);
  for (const auto& [name, tensor] : merged_file.tensors()) {
    EXPECT_EQ(tensor.scalar_type(), at::kFloat) << name;
  }
}

TEST_F(LoraEndToEnd, OptionsThatDoNotFitAreRefusedInOneLine) {
  for (const auto& [extra, message] :
       {std::pair<std::string, std::string>{"--model.lora_targets=attn,qkv", "'qkv' names no layer of the gpt model"},
        {"--model.lora_rank=64", "model.lora_rank=64 is larger than layer transformer.h.0.attn.c_attn"},
        {"--model.lora_train=weights", "model.lora_train: 'weights' is not bias or norm"}}) {
    const ProcessResult r = run_command(lora(1, "bad", extra));
    EXPECT_EQ(r.exit_code, 2) << extra << "\n" << r.err;
    EXPECT_EQ(count_lines_with(r.err, message), 1) << extra << "\n" << r.err;
    EXPECT_FALSE(std::filesystem::exists(work_ + "/bad/checkpoints")) << extra;
  }
}

}  // namespace
}  // namespace hpctrain::testing
