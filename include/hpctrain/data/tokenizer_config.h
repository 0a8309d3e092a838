// A Hugging Face model directory's tokenizer settings beside tokenizer.json: tokenizer_config.json
// (its chat_template, special tokens' strings, add_bos_token) and chat_template.jinja, which newer
// transformers writes instead of the key. Depends on core.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace hpctrain::data {

struct TokenizerConfig {
  std::string chat_template;         // empty: the directory has none
  std::string chat_template_origin;  // where it came from, for messages
  // bos_token, eos_token, pad_token, unk_token, ... as strings (an AddedToken's content); a
  // token the file sets to null is absent.
  std::map<std::string, std::string> special_tokens;
  bool add_bos_token = false;
  bool add_eos_token = false;
};

// `path`: a model directory, its tokenizer.json or tokenizer_config.json. A directory without a
// tokenizer_config.json gives an empty config; a file that is too large, not JSON or has keys of
// the wrong type is a DataError naming the file and key. `chat_template_file`, when given,
// replaces the directory's template (--chat-template).
TokenizerConfig read_tokenizer_config(const std::string& path, const std::string& chat_template_file = "");

}  // namespace hpctrain::data
