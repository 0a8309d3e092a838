// `hpctrain tokenize`: a tokenizer.json's ids of texts and its decoding of them, or a model's chat
// template rendered for conversations, one JSON line each: how a user checks the tokenizer and the
// template against transformers, and how the tests check them against Hugging Face's tokenizers
// and Jinja2.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/data/chat_template.h"
#include "hpctrain/data/hf_tokenizer.h"
#include "hpctrain/data/tokenizer_config.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/launch/commands.h"

namespace hpctrain::cli {
namespace {

const char* kTokenizeUsage =
    "usage: hpctrain tokenize --tokenizer PATH (--text TEXT | --texts FILE) [--add-special-tokens]\n"
    "                         [--plain-special]\n"
    "       hpctrain tokenize --tokenizer DIR --conversations FILE [--chat-template FILE]\n\n"
    "Encodes texts with a Hugging Face tokenizer.json and decodes the ids again; prints one JSON line\n"
    "per text: {\"ids\": [...], \"decoded\": \"...\", \"decoded_skip_special\": \"...\"}.\n"
    "With --conversations, renders each line's conversation with the model's chat template as\n"
    "transformers' apply_chat_template(tokenize=False) does and prints {\"text\": \"...\", \"ids\": [...],\n"
    "\"spans\": [[begin, end, message], ...]}: the text's bytes that came from each message's strings,\n"
    "and ids where DIR has a tokenizer.json; or {\"error\": \"...\", \"raised\": true|false} where the\n"
    "template refuses the conversation (raise_exception) or fails on it.\n"
    "  --tokenizer PATH       tokenizer.json, or a model directory holding it\n"
    "  --text TEXT            one text\n"
    "  --texts FILE           JSON Lines, each line a JSON string\n"
    "  --add-special-tokens   the post-processor's tokens around each text (Llama 3's <|begin_of_text|>),\n"
    "                         as transformers' tokenizer(text) adds them\n"
    "  --plain-special        special tokens' strings in the text encoded as plain text, as for text a\n"
    "                         user typed\n"
    "  --conversations FILE   JSON Lines, each line the template's variables: {\"messages\": [...],\n"
    "                         \"add_generation_prompt\": true, \"tools\": [...], ...}; the special tokens\n"
    "                         of tokenizer_config.json (bos_token, ...) are added unless a line sets them\n"
    "  --chat-template FILE   this template instead of the directory's chat_template.jinja or\n"
    "                         tokenizer_config.json's chat_template\n";

std::vector<nlohmann::ordered_json> read_conversations(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("tokenize: --conversations " + path + ": cannot read");
  std::vector<nlohmann::ordered_json> out;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    nlohmann::ordered_json record = nlohmann::ordered_json::parse(line, nullptr, false);
    if (!record.is_object()) {
      throw ConfigError("tokenize: --conversations " + path + ":" + std::to_string(number) + ": not a JSON object");
    }
    out.push_back(std::move(record));
  }
  return out;
}

int render_conversations(const config::ParsedArgs& parsed) {
  const std::string& dir = parsed.flags.at("tokenizer");
  const data::TokenizerConfig config =
      data::read_tokenizer_config(dir, parsed.has("chat-template") ? parsed.flags.at("chat-template") : "");
  if (config.chat_template.empty()) {
    throw DataError("tokenize: " + dir + " has no chat template (give one with --chat-template FILE)");
  }
  const std::vector<nlohmann::ordered_json> records = read_conversations(parsed.flags.at("conversations"));
  const data::ChatTemplate chat(config.chat_template, config.chat_template_origin);
  const bool has_tokenizer = !std::filesystem::is_directory(dir) || std::filesystem::exists(dir + "/tokenizer.json");
  const std::unique_ptr<data::HfTokenizer> tokenizer = has_tokenizer ? data::HfTokenizer::load(dir) : nullptr;
  for (nlohmann::ordered_json variables : records) {
    for (const auto& [key, token] : config.special_tokens) {
      if (!variables.contains(key)) variables[key] = token;
    }
    nlohmann::json line;
    try {
      const data::RenderedChat rendered = chat.render(variables);
      nlohmann::json spans = nlohmann::json::array();
      for (const data::MessageSpan& span : rendered.spans) spans.push_back({span.begin, span.end, span.message});
      line = {{"text", rendered.text}, {"spans", spans}};
      if (tokenizer) line["ids"] = tokenizer->encode(rendered.text);
    } catch (const data::ChatTemplateError& e) {
      line = {{"error", e.what()}, {"raised", e.raised}};
    }
    std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  }
  return 0;
}

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
  const std::vector<config::Flag> flags{{"tokenizer", true, ""},      {"text", true, ""},
                                        {"texts", true, ""},          {"add-special-tokens", false, ""},
                                        {"plain-special", false, ""}, {"conversations", true, ""},
                                        {"chat-template", true, ""}};
  if (wants_help(args)) {
    std::cout << kTokenizeUsage;
    return 0;
  }
  const config::ParsedArgs parsed = config::parse_args(args, flags, /*with_options=*/false, false);
  if (!parsed.has("tokenizer")) throw ConfigError("tokenize: --tokenizer is required (hpctrain tokenize --help)");
  if (parsed.has("conversations")) return render_conversations(parsed);
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
