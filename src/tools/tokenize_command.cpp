// `hpctrain tokenize`: a tokenizer.json's ids of texts and its decoding of them, one JSON line
// per text: how a user checks the tokenizer against transformers, and how the tests check it
// against Hugging Face's tokenizers.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/data/hf_tokenizer.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/launch/commands.h"

namespace hpctrain::cli {
namespace {

const char* kTokenizeUsage =
    "usage: hpctrain tokenize --tokenizer PATH (--text TEXT | --texts FILE) [--add-special-tokens]\n"
    "                         [--plain-special]\n\n"
    "Encodes texts with a Hugging Face tokenizer.json and decodes the ids again; prints one JSON line\n"
    "per text: {\"ids\": [...], \"decoded\": \"...\", \"decoded_skip_special\": \"...\"}.\n"
    "  --tokenizer PATH       tokenizer.json, or a model directory holding it\n"
    "  --text TEXT            one text\n"
    "  --texts FILE           JSON Lines, each line a JSON string\n"
    "  --add-special-tokens   the post-processor's tokens around each text (Llama 3's <|begin_of_text|>),\n"
    "                         as transformers' tokenizer(text) adds them\n"
    "  --plain-special        special tokens' strings in the text encoded as plain text, as for text a\n"
    "                         user typed\n";

std::vector<std::string> read_texts(const config::ParsedArgs& parsed) {
  if (parsed.has("text") == parsed.has("texts")) {
    throw ConfigError("tokenize: give --text TEXT or --texts FILE, one of the two (hpctrain tokenize --help)");
  }
  if (parsed.has("text")) return {parsed.flags.at("text")};
  const std::string& path = parsed.flags.at("texts");
  std::ifstream in(path);
  if (!in) throw ConfigError("tokenize: --texts " + path + ": cannot read");
  std::vector<std::string> texts;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const nlohmann::json text = nlohmann::json::parse(line, nullptr, false);
    if (!text.is_string()) {
      throw ConfigError("tokenize: --texts " + path + ":" + std::to_string(number) + ": not a JSON string");
    }
    texts.push_back(text.get<std::string>());
  }
  return texts;
}

}  // namespace

int run_tokenize(const Args& args) {
  const std::vector<config::Flag> flags{{"tokenizer", true, ""},
                                        {"text", true, ""},
                                        {"texts", true, ""},
                                        {"add-special-tokens", false, ""},
                                        {"plain-special", false, ""}};
  if (wants_help(args)) {
    std::cout << kTokenizeUsage;
    return 0;
  }
  const config::ParsedArgs parsed = config::parse_args(args, flags, /*with_options=*/false, false);
  if (!parsed.has("tokenizer")) throw ConfigError("tokenize: --tokenizer is required (hpctrain tokenize --help)");
  const std::vector<std::string> texts = read_texts(parsed);
  const std::unique_ptr<data::HfTokenizer> tokenizer = data::HfTokenizer::load(parsed.flags.at("tokenizer"));
  const data::EncodeOptions options{parsed.has("add-special-tokens"), !parsed.has("plain-special")};
  for (const std::string& text : texts) {
    const std::vector<std::int32_t> ids = tokenizer->encode(text, options);
    const nlohmann::json line{{"ids", ids},
                              {"decoded", tokenizer->decode(ids, false)},
                              {"decoded_skip_special", tokenizer->decode(ids, true)}};
    std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  }
  return 0;
}

}  // namespace hpctrain::cli
