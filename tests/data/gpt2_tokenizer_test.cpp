// data::Gpt2Tokenizer on files made here: GPT-2's pre-token split, BPE merges in rank order, the
// byte alphabet both ways, and one line for each way its files can be wrong. (The e2e test
// compares it with the reference encoder on GPT-2's own files.)
#include "hpctrain/data/gpt2_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hpctrain/core/error.h"

namespace hpctrain::data {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("hpctrain_bpe_" + std::to_string(::getpid()) + "_" + name)).string();
}

// GPT-2's alphabet for one byte, as UTF-8: printable bytes stand for themselves, the others for
// 256 + their rank among the non-printable ones (so ' ' is 'Ġ', U+0120).
std::string letter(int byte) {
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const int code = printable ? b : next++;
    if (b != byte) continue;
    std::string out;
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
    return out;
  }
  return "";
}

// Every byte a token (id = byte), then `merged` tokens in order, with `merges` lines.
struct Files {
  std::string encoder = temp_path("encoder.json");
  std::string merges = temp_path("vocab.bpe");
  Files(const std::vector<std::string>& merged, const std::string& merge_lines) {
    nlohmann::json j;
    for (int b = 0; b < 256; ++b) j[letter(b)] = b;
    for (size_t i = 0; i < merged.size(); ++i) j[merged[i]] = 256 + i;
    std::ofstream(encoder) << j.dump();
    std::ofstream(merges) << "#version: 0.2\n" << merge_lines;
  }
  ~Files() {
    fs::remove(encoder);
    fs::remove(merges);
  }
};

TEST(Gpt2Tokenizer, SplitsTextAsGpt2sPatternDoes) {
  EXPECT_EQ(gpt2_pretokens("Hello world's  test\n\n 123abc!! ?x"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " test", "\n\n", " 123", "abc", "!!", " ?", "x"}));
  EXPECT_EQ(gpt2_pretokens("a   "), (std::vector<std::string>{"a", "   "}));  // trailing spaces: one piece
  EXPECT_EQ(gpt2_pretokens("é日本 😀'LL"), (std::vector<std::string>{"é日本", " 😀'", "LL"}));
  EXPECT_EQ(gpt2_pretokens("x\xff"), (std::vector<std::string>{"x", "\xef\xbf\xbd"}));  // a bad byte: U+FFFD
}

TEST(Gpt2Tokenizer, MergesByRankAndDecodesBackToTheBytes) {
  // Ranks: "h e" first, then "Ġ he" (' ' + "he"), then "l l".
  const Files files({"he", letter(' ') + "he", "ll"}, "h e\n" + letter(' ') + " he\nl l\n");
  const Gpt2Tokenizer t = Gpt2Tokenizer::load(files.encoder, files.merges);
  EXPECT_EQ(t.vocabulary_size(), 259);
  EXPECT_EQ(t.encode("hell he"), (std::vector<std::int32_t>{256, 258, 257}));  // he|ll, Ġhe
  EXPECT_EQ(t.encode("\n\xe6\x97\xa5"), (std::vector<std::int32_t>{'\n', 0xe6, 0x97, 0xa5}));
  EXPECT_EQ(t.decode(t.encode("hell he\n\xe6\x97\xa5")), "hell he\n\xe6\x97\xa5");
  EXPECT_THROW(t.decode({259}), DataError);
}

std::string refusal(const Files& files) {
  try {
    Gpt2Tokenizer::load(files.encoder, files.merges);
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    return e.what();
  }
  return "accepted";
}

TEST(Gpt2Tokenizer, EachDamageToItsFilesIsOneLine) {
  EXPECT_NE(refusal(Files({"he"}, "h e\nh\n")).find("vocab.bpe:3: not a merge"), std::string::npos);
  EXPECT_NE(refusal(Files({"h e"}, "")).find("is not written in GPT-2's byte alphabet"), std::string::npos);
  {
    const Files files({}, "");
    std::ofstream(files.encoder) << R"({"a": 1, "b": 1})";
    EXPECT_NE(refusal(files).find("given twice"), std::string::npos);
    std::ofstream(files.encoder) << R"({"a": 70000})";
    EXPECT_NE(refusal(files).find("ids run from 0 to 65535"), std::string::npos);
    std::ofstream(files.encoder) << R"({"a": 0})";
    EXPECT_NE(refusal(files).find("has no token of its own"), std::string::npos);
    std::ofstream(files.encoder) << R"([1, 2])";
    EXPECT_NE(refusal(files).find("not GPT-2's encoder.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace hpctrain::data
