#include "hpctrain/config/decoder_config.h"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"

namespace hpctrain::config {
namespace {

using Json = nlohmann::json;

// config.json files are a few kilobytes; a larger one is not a model's configuration.
constexpr std::int64_t kMaxConfigBytes = 1 << 20;
// Bounds that no released model comes near, so a typo fails here rather than in an allocation.
constexpr std::int64_t kMaxDimension = 1 << 20;
constexpr std::int64_t kMaxVocabulary = 1 << 24;
constexpr std::int64_t kMaxLayers = 1024;

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  throw ConfigError(where + ": " + what);
}

const Json* find(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::int64_t integer(const std::string& where, const Json& object, const char* key, std::int64_t fallback,
                     std::int64_t lowest, std::int64_t highest) {
  const Json* value = find(object, key);
  if (value == nullptr) {
    if (fallback >= lowest) return fallback;
    refuse(where, std::string("missing \"") + key + "\" (an integer), which the model's shape needs");
  }
  if (!value->is_number_integer() || value->get<std::int64_t>() < lowest || value->get<std::int64_t>() > highest) {
    refuse(where, std::string("\"") + key + "\" is " + value->dump() + "; it must be an integer from " +
                      std::to_string(lowest) + " to " + std::to_string(highest));
  }
  return value->get<std::int64_t>();
}

std::int64_t required(const std::string& where, const Json& object, const char* key, std::int64_t highest) {
  return integer(where, object, key, /*fallback=*/0, /*lowest=*/1, highest);
}

double positive_number(const std::string& where, const Json& object, const char* key, double fallback) {
  const Json* value = find(object, key);
  if (value == nullptr) return fallback;
  if (!value->is_number() || !(value->get<double>() > 0) || value->get<double>() > 1e12) {
    refuse(where, std::string("\"") + key + "\" is " + value->dump() + "; it must be a positive number");
  }
  return value->get<double>();
}

bool boolean(const std::string& where, const Json& object, const char* key, bool fallback) {
  const Json* value = find(object, key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) {
    refuse(where, std::string("\"") + key + "\" is " + value->dump() + "; it must be true or false");
  }
  return value->get<bool>();
}

std::string text(const std::string& where, const Json& object, const char* key) {
  const Json* value = find(object, key);
  if (value == nullptr) return "";
  if (!value->is_string()) refuse(where, std::string("\"") + key + "\" is " + value->dump() + "; it must be a string");
  return value->get<std::string>();
}

// eos_token_id: one id or a list of them (Llama 3's instruct models stop at several).
std::vector<std::int64_t> token_ids(const std::string& where, const Json& object, const char* key) {
  const Json* value = find(object, key);
  if (value == nullptr) return {};
  const auto id = [&](const Json& item) {
    if (!item.is_number_integer() || item.get<std::int64_t>() < 0) {
      refuse(where, std::string("\"") + key + "\" holds " + item.dump() + "; token ids are integers >= 0");
    }
    return item.get<std::int64_t>();
  };
  if (!value->is_array()) return {id(*value)};
  std::vector<std::int64_t> ids;
  for (const Json& item : *value) ids.push_back(id(item));
  return ids;
}

Llama3RopeScaling rope_scaling(const std::string& where, const Json& object) {
  const Json* value = find(object, "rope_scaling");
  if (value == nullptr) return {};
  if (!value->is_object()) refuse(where, "\"rope_scaling\" is " + value->dump() + "; it must be an object or null");
  std::string type = text(where, *value, "rope_type");
  if (type.empty()) type = text(where, *value, "type");  // the older key
  if (type.empty() || type == "default") return {};
  if (type != "llama3") {
    refuse(where, "rope_scaling of type \"" + type + "\" is not supported; hpctrain reads \"llama3\" (Llama 3.1's) "
                  "or none");
  }
  Llama3RopeScaling scaling;
  scaling.enabled = true;
  scaling.factor = positive_number(where, *value, "factor", 0);
  scaling.low_freq_factor = positive_number(where, *value, "low_freq_factor", 0);
  scaling.high_freq_factor = positive_number(where, *value, "high_freq_factor", 0);
  scaling.original_max_positions =
      integer(where, *value, "original_max_position_embeddings", 0, 1, kMaxDimension * 16);
  if (scaling.factor == 0 || scaling.low_freq_factor == 0 || scaling.high_freq_factor == 0) {
    refuse(where, "rope_scaling of type llama3 needs \"factor\", \"low_freq_factor\" and \"high_freq_factor\"");
  }
  if (scaling.high_freq_factor <= scaling.low_freq_factor) {
    refuse(where, "rope_scaling: \"high_freq_factor\" must be larger than \"low_freq_factor\"");
  }
  return scaling;
}

// What differs between the model types, as their Hugging Face config classes define it.
void apply_family(const std::string& where, const Json& json, DecoderConfig& c) {
  if (c.model_type == "qwen2") {
    c.qkv_bias = true;  // Qwen2's attention has biases on q, k and v, with no key to say so
    if (boolean(where, json, "use_sliding_window", false)) {
      refuse(where, "\"use_sliding_window\": true is not supported (Qwen2's sliding window applies to some layers "
                    "only); set it to false, as Qwen2.5's released configs have it");
    }
  } else if (c.model_type != "mistral") {  // Mistral's attention has no biases
    c.qkv_bias = c.o_bias = boolean(where, json, "attention_bias", false);
  }
  c.mlp_bias = c.model_type == "llama" && boolean(where, json, "mlp_bias", false);
  c.qk_norm = c.model_type == "qwen3";
  if (c.model_type == "mistral") c.sliding_window = integer(where, json, "sliding_window", 0, 0, kMaxDimension * 16);
}

std::int64_t default_max_positions(const std::string& model_type) {
  if (model_type == "llama") return 2048;
  if (model_type == "mistral") return 4096 * 32;
  return 32768;  // qwen2, qwen3
}

}  // namespace

const std::vector<std::string>& decoder_model_types() {
  static const std::vector<std::string> types{"llama", "qwen2", "qwen3", "mistral"};
  return types;
}

DecoderConfig parse_decoder_config(const std::string& content, const std::string& where) {
  Json json;
  try {
    json = Json::parse(content);
  } catch (const Json::exception& e) {
    refuse(where, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!json.is_object()) refuse(where, "not a JSON object; a model's config.json is one");
  DecoderConfig c;
  c.where = where;
  c.model_type = text(where, json, "model_type");
  std::string supported;
  for (const std::string& type : decoder_model_types()) supported += (supported.empty() ? "" : ", ") + type;
  if (c.model_type.empty()) refuse(where, "missing \"model_type\"; model.name=llama reads " + supported);
  bool known = false;
  for (const std::string& type : decoder_model_types()) known = known || type == c.model_type;
  if (!known) {
    refuse(where, "model_type \"" + c.model_type + "\" is not supported; model.name=llama reads " + supported);
  }
  c.vocab_size = required(where, json, "vocab_size", kMaxVocabulary);
  c.hidden_size = required(where, json, "hidden_size", kMaxDimension);
  c.layers = required(where, json, "num_hidden_layers", kMaxLayers);
  c.heads = required(where, json, "num_attention_heads", kMaxDimension);
  c.intermediate_size = required(where, json, "intermediate_size", kMaxDimension);
  c.kv_heads = integer(where, json, "num_key_value_heads", c.heads, 1, kMaxDimension);
  if (c.heads % c.kv_heads != 0) {
    refuse(where, "num_attention_heads=" + std::to_string(c.heads) + " is not a multiple of num_key_value_heads=" +
                      std::to_string(c.kv_heads) + " (each KV head serves the same number of query heads)");
  }
  const std::int64_t default_head_dim = c.model_type == "qwen3" ? 128 : c.hidden_size / c.heads;
  c.head_dim = integer(where, json, "head_dim", default_head_dim, 1, kMaxDimension);
  if (find(json, "head_dim") == nullptr && c.model_type != "qwen3" && c.hidden_size % c.heads != 0) {
    refuse(where, "hidden_size=" + std::to_string(c.hidden_size) + " is not a multiple of num_attention_heads=" +
                      std::to_string(c.heads) + " and no \"head_dim\" is given");
  }
  if (c.head_dim % 2 != 0) refuse(where, "head_dim=" + std::to_string(c.head_dim) + " must be even (rotary pairs)");
  c.max_positions = integer(where, json, "max_position_embeddings", default_max_positions(c.model_type), 1,
                            kMaxDimension * 16);
  c.rms_norm_eps = positive_number(where, json, "rms_norm_eps", 1e-6);
  c.rope_theta = positive_number(where, json, "rope_theta", 10000.0);
  c.rope_scaling = rope_scaling(where, json);
  const std::string activation = text(where, json, "hidden_act");
  if (!activation.empty() && activation != "silu") {
    refuse(where, "hidden_act \"" + activation + "\" is not supported; the Llama family's MLP uses silu (SwiGLU)");
  }
  c.tie_word_embeddings = boolean(where, json, "tie_word_embeddings", false);
  apply_family(where, json, c);
  c.eos_token_ids = token_ids(where, json, "eos_token_id");
  const std::vector<std::int64_t> bos = token_ids(where, json, "bos_token_id");
  c.bos_token_id = bos.empty() ? -1 : bos.front();
  c.torch_dtype = text(where, json, "torch_dtype");
  if (c.torch_dtype.empty()) c.torch_dtype = text(where, json, "dtype");  // newer transformers' key
  return c;
}

DecoderConfig read_decoder_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string file = fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string() : path;
  const std::string text = sys::read_small_file<ConfigError>(
      file, kMaxConfigBytes, "the model's config.json",
      "model.init_from names a Hugging Face model directory, model.hf_config its config.json");
  return parse_decoder_config(text, file);
}

GenerationDefaults parse_generation_config(const std::string& text, const std::string& where) {
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) refuse(where, "not a JSON object; not a generation_config.json");
  GenerationDefaults g;
  g.present = true;
  g.do_sample = boolean(where, json, "do_sample", false);
  g.temperature = positive_number(where, json, "temperature", 1.0);
  g.top_p = positive_number(where, json, "top_p", 1.0);
  if (g.top_p > 1) refuse(where, "\"top_p\" is " + std::to_string(g.top_p) + "; it must be in (0, 1]");
  g.top_k = integer(where, json, "top_k", 50, 0, kMaxVocabulary);
  g.eos_token_ids = token_ids(where, json, "eos_token_id");
  return g;
}

GenerationDefaults read_generation_config(const std::string& model_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::is_directory(model_dir, ec) ? fs::path(model_dir) : fs::path(model_dir).parent_path();
  const std::string file = (dir / "generation_config.json").string();
  if (!fs::exists(file, ec)) return {};
  return parse_generation_config(
      sys::read_small_file<ConfigError>(file, kMaxConfigBytes, "the model's generation_config.json"), file);
}

std::string decoder_config_path(const ModelConfig& config) {
  if (!config.hf_config.empty()) return config.hf_config;
  if (!config.init_from.empty()) return config.init_from;
  throw ConfigError("model.name=llama takes its shape from a Hugging Face config.json: set model.init_from to a model "
                    "directory, or model.hf_config to a config.json (configs/models/ has some) to train from scratch");
}

}  // namespace hpctrain::config
