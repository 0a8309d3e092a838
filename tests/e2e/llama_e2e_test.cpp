// The llama model against the plain-PyTorch reference (tests/support/llama_reference.py), through
// the real executable, for each family at small shapes with grouped-query attention: `hpctrain
// forward`'s logits (with an attention_mask too), greedy generation with and without the KV cache,
// a batch of prompts of different lengths, the stop at an EOS id, the first training step's loss
// and gradient norm, a sharded directory against one file, ZeRO stage 3 against stage 0; `ckpt
// export --format hf` of a stage-3 run and of a LoRA run (a PEFT adapter, a merged model), loaded
// strictly by the reference; the reference's own mistakes (a wrong RoPE, swapped gate/up, KV heads
// repeated in the wrong order) are far outside the tolerance; broken model directories are refused
// in one line, with their exit code and no run directory.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "e2e.h"
#include "hpctrain/core/system.h"
#include "process.h"
#include "same_checkpoints.h"

namespace hpctrain::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kReference = "/usr/bin/python3 " + kSource + "/tests/support/llama_reference.py";
const std::vector<std::string> kFamilies{"llama", "llama3", "qwen2", "qwen3", "mistral"};
constexpr double kTolerance = 1e-5;  // float32 logits, relative to the largest

class LlamaEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    work_ = make_temp_dir("llama");
    for (const std::string& family : kFamilies) make(family, "--family " + family);
    make("llama-sharded", "--family llama --shards 3");
    std::ofstream(work_ + "/text.txt") << "the llama reads this.and then the rest..xx";  // 42 bytes
    std::ofstream(work_ + "/generate.ini") << "[model]\nname = llama\n";
    const ProcessResult r = run_command(kBin + " prepare text --source " + work_ + "/text.txt --out " + work_ +
                                        "/one-window --test-fraction 0.5");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    {
      std::ofstream lines(work_ + "/lines.txt");
      for (int i = 0; i < 300; ++i) lines << "line " << (i * 37) % 101 << " of the llama text\n";
    }
    const ProcessResult t =
        run_command(kBin + " prepare text --source " + work_ + "/lines.txt --out " + work_ + "/tokens");
    ASSERT_EQ(t.exit_code, 0) << t.err;
  }
  static void TearDownTestSuite() { sys::remove_tree(work_); }

  static void make(const std::string& name, const std::string& args) {
    const ProcessResult r = run_command(kReference + " make " + work_ + "/" + name + " " + args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // `hpctrain forward` on the tokens.safetensors of directory `tokens_of` (default: the model's);
  // the logits' file.
  static std::string forward(const std::string& model, const std::string& tokens_of = "") {
    const std::string out = work_ + "/" + model + "-ours.safetensors";
    const ProcessResult r = run_command(kBin + " forward --model " + work_ + "/" + model + " --inputs " + work_ + "/" +
                                        (tokens_of.empty() ? model : tokens_of) + "/tokens.safetensors --out " + out);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  }

  static double difference(const std::string& a, const std::string& b) {
    const ProcessResult r = run_command(kReference + " compare " + a + " " + b);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return r.exit_code == 0 ? json::parse(r.out)["max_relative_difference"].get<double>() : 1.0;
  }

  static std::string train(int ranks, const std::string& model, const std::string& data, const std::string& run,
                           const std::string& extra) {
    return mpirun(ranks) + kBin + " train --model.name=llama --model.init_from=" + work_ + "/" + model +
           " --data.path=" + work_ + "/" + data + " --run.dir=" + work_ + "/" + run +
           " --train.threads=1 --ckpt.keep_last=0 --log.every_steps=1 " + extra;
  }

  static std::string work_;
};

std::string LlamaEndToEnd::work_;

TEST_F(LlamaEndToEnd, LogitsEqualTheReferencesForEveryFamily) {
  for (const std::string& family : kFamilies) {
    SCOPED_TRACE(family);
    EXPECT_LT(difference(forward(family), work_ + "/" + family + "/expected.safetensors"), kTolerance);
  }
}

// What the comparison would see of a port with one of these bugs: the reference computing its
// logits so is far outside the tolerance of ours.
TEST_F(LlamaEndToEnd, AWrongRopeSwappedGateAndUpOrKvHeadsInTheWrongOrderAreCaught) {
  const std::string ours = forward("llama3");
  for (const std::string mutation : {"rope-pairs", "kv-order", "gate-up", "no-rope-scaling"}) {
    SCOPED_TRACE(mutation);
    const std::string wrong = work_ + "/wrong-" + mutation + ".safetensors";
    const ProcessResult r = run_command(kReference + " logits " + work_ + "/llama3 --tokens " + work_ +
                                        "/llama3/tokens.safetensors --out " + wrong + " --mutate " + mutation);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_GT(difference(ours, wrong), 1000 * kTolerance);
  }
}

TEST_F(LlamaEndToEnd, GreedyGenerationEqualsTheReferencesWithAndWithoutTheCache) {
  const std::string prompt = "hello";  // byte tokens 104,101,108,108,111
  for (const std::string& family : kFamilies) {
    SCOPED_TRACE(family);
    const ProcessResult expected = run_command(kReference + " greedy " + work_ + "/" + family +
                                               " --prompt 104,101,108,108,111 --new 40");
    ASSERT_EQ(expected.exit_code, 0) << expected.err;
    for (const std::string cache : {"", " --no-kv-cache"}) {
      const ProcessResult r = run_command(kBin + " generate --weights " + work_ + "/" + family + " --config " + work_ +
                                          "/generate.ini --prompt " + prompt +
                                          " --temperature 0 --max-new-tokens 40 --tokenizer bytes --ignore-eos" +
                                          cache);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(json::parse(r.out)["tokens"], json::parse(expected.out)) << cache;
    }
  }
}

// Prompts of different lengths in one batch, padded on the left: each continues as the reference
// continues it alone, with and without the cache.
TEST_F(LlamaEndToEnd, ABatchOfPromptsOfDifferentLengthsContinuesAsEachAlone) {
  const std::vector<std::pair<std::string, std::string>> prompts{
      {"ab", "97,98"}, {"hello there", "104,101,108,108,111,32,116,104,101,114,101"}, {"x", "120"}};
  std::ofstream(work_ + "/prompts.txt") << "ab\nhello there\nx\n";
  for (const std::string family : {"llama3", "qwen3"}) {
    SCOPED_TRACE(family);
    for (const std::string cache : {"", " --no-kv-cache"}) {
      const ProcessResult r = run_command(kBin + " generate --weights " + work_ + "/" + family + " --config " + work_ +
                                          "/generate.ini --prompts " + work_ + "/prompts.txt --batch-size 3 "
                                          "--temperature 0 --max-new-tokens 12 --tokenizer bytes" + cache);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      std::istringstream lines(r.out);
      for (const auto& [text, ids] : prompts) {
        std::string line;
        ASSERT_TRUE(std::getline(lines, line)) << r.out;
        const ProcessResult alone =
            run_command(kReference + " greedy " + work_ + "/" + family + " --prompt " + ids + " --new 12");
        ASSERT_EQ(alone.exit_code, 0) << alone.err;
        EXPECT_EQ(json::parse(line)["tokens"], json::parse(alone.out)) << text << cache;
      }
    }
  }
}

// generation_config.json's eos_token_id (a list) ends a continuation before the EOS, and its
// do_sample=false makes generation greedy without --temperature; --ignore-eos goes on.
TEST_F(LlamaEndToEnd, GenerationStopsAtAnyEosIdOfGenerationConfig) {
  const ProcessResult expected =
      run_command(kReference + " greedy " + work_ + "/llama --prompt 104,101,108,108,111 --new 10");
  ASSERT_EQ(expected.exit_code, 0) << expected.err;
  const std::vector<int> greedy = json::parse(expected.out).get<std::vector<int>>();
  const std::string dir = work_ + "/llama-eos";
  fs::copy(work_ + "/llama", dir, fs::copy_options::recursive);
  std::ofstream(dir + "/generation_config.json")
      << json{{"do_sample", false}, {"temperature", 0.6}, {"eos_token_id", {1000, greedy[4]}}}.dump();
  const std::string command = kBin + " generate --weights " + dir + " --config " + work_ +
                              "/generate.ini --prompt hello --max-new-tokens 10 --tokenizer bytes";
  const ProcessResult r = run_command(command);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto stop = std::find(greedy.begin(), greedy.end(), greedy[4]);  // its first appearance
  EXPECT_EQ(json::parse(r.out)["tokens"], json(std::vector<int>(greedy.begin(), stop)));
  EXPECT_EQ(json::parse(r.out)["finish_reason"], "stop");
  const ProcessResult on = run_command(command + " --ignore-eos");
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_EQ(json::parse(on.out)["tokens"], json(greedy));
  EXPECT_EQ(json::parse(on.out)["finish_reason"], "length");
}

// One window of 21 tokens (the train split's 21 bytes), one step: the loss and the gradient norm
// before clipping are the reference's on the same tokens.
TEST_F(LlamaEndToEnd, TheFirstTrainingStepsLossAndGradientNormAreTheReferences) {
  for (const std::string& family : kFamilies) {
    SCOPED_TRACE(family);
    const ProcessResult r = run_command(train(1, family, "one-window", "step-" + family,
                                              "--model.gpt_block_size=20 --train.batch_size=1 --train.max_steps=1 "
                                              "--data.eval_split="));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json step;
    std::istringstream lines(read_file(work_ + "/step-" + family + "/metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) {
      const json record = json::parse(line);
      if (record.contains("loss")) step = record;
    }
    ASSERT_TRUE(step.contains("grad_norm")) << r.err;
    std::string ids;
    for (const char c : std::string("the llama reads this.")) ids += (ids.empty() ? "" : ",") + std::to_string(c);
    const ProcessResult expected = run_command(kReference + " loss " + work_ + "/" + family + " --ids " + ids);
    ASSERT_EQ(expected.exit_code, 0) << expected.err;
    const json reference = json::parse(expected.out);
    EXPECT_NEAR(step["loss"].get<double>(), reference["loss"].get<double>(), 1e-5 * reference["loss"].get<double>());
    EXPECT_NEAR(step["grad_norm"].get<double>(), reference["grad_norm"].get<double>(),
                1e-4 * reference["grad_norm"].get<double>());
  }
}

TEST_F(LlamaEndToEnd, AShardedDirectoryLoadsAsOneFile) {
  ASSERT_TRUE(fs::exists(work_ + "/llama-sharded/model.safetensors.index.json"));
  ASSERT_TRUE(fs::exists(work_ + "/llama-sharded/model-00003-of-00003.safetensors"));
  // The same weights (the same seed), so the same logits to the bit.
  EXPECT_EQ(difference(forward("llama-sharded"), forward("llama")), 0.0);
}

// Stage 3 gathers each decoder layer for its forward and backward alone: the same training, up to
// the order in which MPI's reduce-scatter and allreduce add at -np 3. Stage 3 reads each rank's
// shard of the weights from the file (the only copy of them it makes), tied or not.
TEST_F(LlamaEndToEnd, ZeroStageThreeAtThreeRanksEqualsStageZero) {
  const std::string common = "--model.gpt_block_size=16 --train.batch_size=2 --train.max_steps=4 --data.eval_split=val";
  for (const std::string family : {"qwen3", "qwen2"}) {
    SCOPED_TRACE(family);
    for (const std::string stage : {"0", "3"}) {
      const ProcessResult r = run_command(
          train(3, family, "tokens", "zero" + stage + family, common + " --dist.zero_stage=" + stage));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const bool by_shard = (r.out + r.err).find("to be read shard by shard") != std::string::npos;
      EXPECT_EQ(by_shard, stage == "3") << r.out << r.err;
    }
    const std::string zero0 = work_ + "/zero0" + family + "/checkpoints/ckpt-4.h5";
    const std::string zero3 = work_ + "/zero3" + family + "/checkpoints/ckpt-4.h5";
    // A key's bias shifts every score of a query alike, which softmax ignores: its gradient is
    // rounding alone, which AdamW scales up to whole steps, so qwen2's k_proj.bias is left out.
    const double model = relative_difference(zero0, zero3, "model", "k_proj.bias");
    const double optim = relative_difference(zero0, zero3, "optim", "k_proj.bias");
    EXPECT_LT(model, 1e-6);
    EXPECT_LT(optim, 1e-5);
    std::printf("%s, stage 3 against stage 0: model %.3g, optim %.3g\n", family.c_str(), model, optim);
  }
}

// An attention_mask: each padded row's real tokens get the logits the row has alone, padded on
// the right or the left; a mask of another shape, or of other values, is refused in one line.
TEST_F(LlamaEndToEnd, AnAttentionMaskGivesEachPaddedRowItsOwnLogits) {
  const std::string dir = work_ + "/llama3";
  ASSERT_EQ(run_command(kReference + " pad " + dir).exit_code, 0);
  const std::string ours = work_ + "/padded-ours.safetensors";
  const ProcessResult r =
      run_command(kBin + " forward --model " + dir + " --inputs " + dir + "/padded.safetensors --out " + ours);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string row : {"1", "2"}) {
    const std::string alone = work_ + "/row" + row + "-ref.safetensors";
    ASSERT_EQ(run_command(kReference + " logits " + dir + " --tokens " + dir + "/row" + row + ".safetensors --out " +
                          alone).exit_code, 0);
    const ProcessResult c =
        run_command(kReference + " compare " + ours + " " + alone + " --row " + row + " --from " +
                    (row == "2" ? "6" : "0"));
    ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
    EXPECT_LT(json::parse(c.out)["max_relative_difference"].get<double>(), kTolerance) << "row " << row;
  }
  ASSERT_EQ(run_command("/usr/bin/python3 -c \"import sys; sys.path.insert(0, '" + kSource + "/tests/support'); "
                        "import torch, gpt2_reference as g; t = g.read_safetensors('" + dir + "/padded.safetensors'); "
                        "g.write_safetensors('" + work_ + "/short-mask.safetensors', {'token_ids': t['token_ids'], "
                        "'attention_mask': t['attention_mask'][:, :5].clone()}); "
                        "g.write_safetensors('" + work_ + "/two-mask.safetensors', {'token_ids': t['token_ids'], "
                        "'attention_mask': t['attention_mask'] * 2})\"").exit_code, 0);
  for (const auto& [file, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"short-mask", "attention_mask is [3, 5], token_ids [3, 20]; they must be of one shape"},
           {"two-mask", "attention_mask holds values other than 0 and 1"}}) {
    const ProcessResult bad = run_command(kBin + " forward --model " + dir + " --inputs " + work_ + "/" + file +
                                          ".safetensors --out " + work_ + "/bad.safetensors");
    EXPECT_EQ(bad.exit_code, 2) << bad.err;
    EXPECT_EQ(count_lines_with(bad.err, "hpctrain: error:"), 1) << bad.err;
    EXPECT_NE(bad.err.find(fragment), std::string::npos) << bad.err;
  }
}

// A stage-3 checkpoint exported as a sharded Hugging Face directory: the reference loads it
// strictly, its tensors are the checkpoint's (as the single-file export has them), its logits are
// ours on it; bf16 on request; an existing directory is left alone.
TEST_F(LlamaEndToEnd, ExportOfAStageThreeRunIsADirectoryTheReferenceLoads) {
  const ProcessResult trained = run_command(train(3, "qwen2", "tokens", "export-run",
                                                  "--model.gpt_block_size=16 --train.batch_size=2 --train.max_steps=2 "
                                                  "--data.eval_split=val --dist.zero_stage=3"));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string ckpt = work_ + "/export-run/checkpoints/ckpt-2.h5";
  const std::string out = work_ + "/exported";
  const ProcessResult r = run_command(kBin + " ckpt export " + ckpt + " --format hf --out " + out +
                                      " --max-shard-size 20KB");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("5 safetensors file(s)"), std::string::npos) << r.out;
  const json index = json::parse(read_file(out + "/model.safetensors.index.json"));
  EXPECT_EQ(index["weight_map"]["model.norm.weight"], "model-00005-of-00005.safetensors");
  EXPECT_FALSE(index["weight_map"].contains("lm_head.weight")) << "qwen2's output layer is tied";
  EXPECT_EQ(json::parse(read_file(out + "/config.json"))["torch_dtype"], "float32");

  const ProcessResult flat = run_command(kBin + " ckpt export " + ckpt + " --format safetensors --out " + work_ +
                                         "/export-flat.safetensors");
  ASSERT_EQ(flat.exit_code, 0) << flat.err;
  const ProcessResult same =
      run_command(kReference + " same-weights " + out + " " + work_ + "/export-flat.safetensors");
  ASSERT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_EQ(json::parse(same.out)["max_abs_difference"].get<double>(), 0.0) << same.out;

  const std::string tokens = work_ + "/qwen2/tokens.safetensors";
  const ProcessResult theirs =
      run_command(kReference + " logits " + out + " --tokens " + tokens + " --out " + work_ +
                  "/exported-ref.safetensors");
  ASSERT_EQ(theirs.exit_code, 0) << theirs.err;
  EXPECT_LT(difference(forward("exported", "qwen2"), work_ + "/exported-ref.safetensors"), kTolerance);
  EXPECT_GT(difference(work_ + "/exported-ref.safetensors", work_ + "/qwen2/expected.safetensors"), 1e-3)
      << "training changed nothing";

  const ProcessResult half = run_command(kBin + " ckpt export " + ckpt + " --format hf --dtype bfloat16 --out " +
                                         work_ + "/exported-bf16");
  ASSERT_EQ(half.exit_code, 0) << half.err;
  EXPECT_EQ(json::parse(read_file(work_ + "/exported-bf16/config.json"))["torch_dtype"], "bfloat16");
  EXPECT_LT(fs::file_size(work_ + "/exported-bf16/model.safetensors"), 50'000u);  // 2 bytes a weight

  const ProcessResult again = run_command(kBin + " ckpt export " + ckpt + " --format hf --out " + out);
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("exists and is not an empty directory"), std::string::npos) << again.err;
  EXPECT_TRUE(fs::exists(out + "/model-00001-of-00005.safetensors"));
  for (const auto& [flags, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"--merge", "holds none (not a model.lora_rank run): drop --merge"},
           {"--dtype float64", "--dtype 'float64' is not float32, bfloat16 or float16"},
           {"--names hf-gpt2", "names tensors as transformers does; drop --names"}}) {
    const ProcessResult bad =
        run_command(kBin + " ckpt export " + ckpt + " --format hf " + flags + " --out " + work_ + "/refused");
    EXPECT_EQ(bad.exit_code, 2) << bad.err;
    EXPECT_EQ(count_lines_with(bad.err, "hpctrain: error:"), 1) << bad.err;
    EXPECT_NE(bad.err.find(fragment), std::string::npos) << bad.err;
    EXPECT_FALSE(fs::exists(work_ + "/refused")) << flags;
  }
}

// A LoRA run's adapters as a PEFT adapter directory, which the reference applies as PEFT does,
// and --merge's model: the same logits.
TEST_F(LlamaEndToEnd, ALoraRunExportsAPeftAdapterAndTheMergedModel) {
  const ProcessResult trained = run_command(
      train(1, "llama", "tokens", "lora-run",
            "--model.gpt_block_size=16 --train.batch_size=2 --train.max_steps=3 --data.eval_split=val "
            "--model.lora_rank=4 --model.lora_alpha=8 --model.lora_targets=q_proj,v_proj,down_proj --optim.lr=0.01"));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string ckpt = work_ + "/lora-run/checkpoints/ckpt-3.h5";
  const ProcessResult adapter = run_command(kBin + " ckpt export " + ckpt + " --format hf --out " + work_ + "/adapter");
  ASSERT_EQ(adapter.exit_code, 0) << adapter.err;
  const json config = json::parse(read_file(work_ + "/adapter/adapter_config.json"));
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["target_modules"], json({"q_proj", "v_proj", "down_proj"}));
  const ProcessResult merged =
      run_command(kBin + " ckpt export " + ckpt + " --format hf --merge --out " + work_ + "/merged");
  ASSERT_EQ(merged.exit_code, 0) << merged.err;

  const ProcessResult peft =
      run_command(kReference + " peft-logits " + work_ + "/llama " + work_ + "/adapter --tokens " + work_ +
                  "/llama/tokens.safetensors --out " + work_ + "/peft.safetensors");
  ASSERT_EQ(peft.exit_code, 0) << peft.err;
  EXPECT_GT(json::parse(peft.out)["largest_update"].get<double>(), 1e-4) << "the adapters did not train";
  EXPECT_LT(difference(forward("merged", "llama"), work_ + "/peft.safetensors"), kTolerance);
}

// A broken copy of the llama directory, refused by `hpctrain train` before anything is written.
struct BrokenDirectory {
  std::string name;
  std::function<void(const std::string& dir)> damage;
  int code;
  std::string fragment;
};

void edit_json(const std::string& path, const std::function<void(json&)>& change) {
  json j = json::parse(read_file(path));
  change(j);
  std::ofstream(path) << j.dump(2);
}

TEST_F(LlamaEndToEnd, BrokenModelDirectoriesAreRefusedInOneLineWithNoRunDirectory) {
  const auto config = [](const std::function<void(json&)>& change) {
    return [change](const std::string& dir) { edit_json(dir + "/config.json", change); };
  };
  const auto index = [](const std::function<void(json&)>& change) {
    return [change](const std::string& dir) { edit_json(dir + "/model.safetensors.index.json", change); };
  };
  const std::vector<BrokenDirectory> cases{
      {"MissingKey", config([](json& j) { j.erase("num_hidden_layers"); }), 2,
       "config.json: missing \"num_hidden_layers\" (an integer)"},
      {"UnknownModelType", config([](json& j) { j["model_type"] = "phi3"; }), 2,
       "model_type \"phi3\" is not supported; model.name=llama reads llama, qwen2, qwen3, mistral"},
      {"HeadsNotDivisibleByKvHeads", config([](json& j) { j["num_key_value_heads"] = 3; }), 2,
       "num_attention_heads=4 is not a multiple of num_key_value_heads=3"},
      {"ShapeAgainstTheConfig", config([](json& j) { j["intermediate_size"] = 50; }), 2,
       "model.layers.0.mlp.gate_proj.weight (file [48, 32] Float, model [50, 32] Float)"},
      {"IndexNamesAMissingFile",
       index([](json& j) { j["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors"; }), 4,
       "names model-00009-of-00009.safetensors, which is not in the directory"},
      {"TensorInTwoFiles",
       [](const std::string& dir) {
         fs::copy_file(dir + "/model-00001-of-00003.safetensors", dir + "/model-00004-of-00003.safetensors");
         edit_json(dir + "/model.safetensors.index.json",
                   [](json& j) { j["weight_map"]["extra.weight"] = "model-00004-of-00003.safetensors"; });
       },
       4, "model-00004-of-00003.safetensors: tensor 'model.embed_tokens.weight' is in another shard too"},
      {"TotalSizeDisagrees", index([](json& j) { j["metadata"]["total_size"] = 12; }), 4,
       "metadata.total_size is 12 bytes, but the shards' tensors hold"},
      {"TruncatedShard",
       [](const std::string& dir) {
         const std::string shard = dir + "/model-00002-of-00003.safetensors";
         fs::resize_file(shard, fs::file_size(shard) - 100);
       },
       4, "model-00002-of-00003.safetensors: not a readable safetensors file"},
  };
  for (const BrokenDirectory& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = "broken-" + c.name;
    fs::copy(work_ + "/llama-sharded", work_ + "/" + dir, fs::copy_options::recursive);
    c.damage(work_ + "/" + dir);
    const ProcessResult r =
        run_command(train(1, dir, "tokens", "run-" + c.name, "--model.gpt_block_size=16 --data.eval_split=val"));
    EXPECT_EQ(r.exit_code, c.code) << r.err;
    EXPECT_EQ(count_lines_with(r.err, "hpctrain: error:"), 1) << r.err;
    EXPECT_NE(r.err.find(c.fragment), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(work_ + "/run-" + c.name)) << "a run directory was made";
  }
}

// A dtype a model directory's weights cannot have, through `hpctrain forward`.
TEST_F(LlamaEndToEnd, AnIntegerWeightIsRefused) {
  const std::string dir = work_ + "/broken-dtype";
  fs::copy(work_ + "/llama", dir, fs::copy_options::recursive);
  const ProcessResult made = run_command(
      "/usr/bin/python3 -c \"import sys; sys.path.insert(0, '" + kSource + "/tests/support'); "
      "import torch, gpt2_reference as g; t = g.read_safetensors('" + dir + "/model.safetensors'); "
      "t['model.norm.weight'] = t['model.norm.weight'].long(); "
      "g.write_safetensors('" + dir + "/model.safetensors', t)\"");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const ProcessResult r = run_command(kBin + " forward --model " + dir + " --inputs " + dir +
                                      "/tokens.safetensors --out " + work_ + "/dtype-out.safetensors");
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("tensor 'model.norm.weight' is I64; a model directory's weights are read as F32, F16 or BF16"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(work_ + "/dtype-out.safetensors"));
}

}  // namespace
}  // namespace hpctrain::testing
