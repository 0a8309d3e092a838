// tokenizer_config.json and chat_template.jinja, read with their sizes checked first.
#include "hpctrain/data/tokenizer_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"

namespace hpctrain::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::int64_t kMaxConfigBytes = std::int64_t{16} << 20;   // Llama 3's is 50 KB
constexpr std::int64_t kMaxTemplateBytes = std::int64_t{1} << 20;  // the engine's bound too

fs::path model_directory(const std::string& path) {
  if (fs::is_directory(path)) return fs::path(path);
  return fs::path(path).parent_path();
}

// A chat_template value: a string, or a list of {name, template} where "default" is the one.
std::string template_of(const json& value, const std::string& where) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) throw DataError(where + ": chat_template is neither a string nor a list of named templates");
  for (const json& entry : value) {
    if (entry.is_object() && entry.value("name", json()) == "default" && entry.value("template", json()).is_string()) {
      return entry["template"].get<std::string>();
    }
  }
  throw DataError(where + ": chat_template lists no template named \"default\" (give one with --chat-template FILE)");
}

void read_special_tokens(const json& config, const std::string& where, TokenizerConfig& out) {
  // transformers' SPECIAL_TOKENS_ATTRIBUTES, which apply_chat_template passes to the template.
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    const json& value = config.value(key, json());
    if (value.is_null()) continue;
    if (value.is_string()) {
      out.special_tokens[key] = value.get<std::string>();
    } else if (value.is_object() && value.value("content", json()).is_string()) {
      out.special_tokens[key] = value["content"].get<std::string>();
    } else {
      throw DataError(where + ": " + key + " is neither a string nor a token with a \"content\" string");
    }
  }
}

bool flag(const json& config, const char* key, const std::string& where) {
  const json& value = config.value(key, json());
  if (value.is_null()) return false;
  if (!value.is_boolean()) throw DataError(where + ": " + key + " is not true or false");
  return value.get<bool>();
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::string& path, const std::string& chat_template_file) {
  TokenizerConfig out;
  const fs::path dir = model_directory(path);
  const fs::path config_path =
      fs::path(path).filename() == "tokenizer_config.json" ? fs::path(path) : dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const std::string where = config_path.string();
    const json config =
        json::parse(sys::read_small_file<DataError>(where, kMaxConfigBytes, "a tokenizer_config.json"), nullptr, false);
    if (!config.is_object()) throw DataError(where + ": not JSON, or not a tokenizer_config.json (a JSON object)");
    read_special_tokens(config, where, out);
    out.add_bos_token = flag(config, "add_bos_token", where);
    out.add_eos_token = flag(config, "add_eos_token", where);
    if (config.contains("chat_template")) {
      out.chat_template = template_of(config["chat_template"], where);
      out.chat_template_origin = where + "'s chat_template";
    }
  }
  const fs::path jinja_file = dir / "chat_template.jinja";
  std::string file = chat_template_file;
  if (file.empty() && fs::exists(jinja_file)) file = jinja_file.string();
  if (!file.empty()) {
    out.chat_template = sys::read_small_file<DataError>(file, kMaxTemplateBytes, "a chat template");
    out.chat_template_origin = file;
  }
  return out;
}

}  // namespace hpctrain::data
