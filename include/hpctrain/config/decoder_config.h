// The shape and variant of a Llama-family decoder (model.name=llama), read from a Hugging Face
// config.json: model_type llama, qwen2, qwen3 or mistral. Keys a model_type's config class
// defaults are defaulted as it does; the shape's keys are required. Depends on core.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/config/config.h"

namespace hpctrain::config {

// Llama 3.1's rope_scaling of rope_type "llama3": long wavelengths slowed by `factor`, short ones
// kept, the band between blended.
struct Llama3RopeScaling {
  bool enabled = false;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_positions = 8192;
};

struct DecoderConfig {
  std::string model_type;  // llama, qwen2, qwen3, mistral
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t layers = 0;          // num_hidden_layers
  std::int64_t heads = 0;           // num_attention_heads
  std::int64_t kv_heads = 0;        // num_key_value_heads (grouped-query attention when < heads)
  std::int64_t head_dim = 0;        // hidden_size / heads unless given
  std::int64_t intermediate_size = 0;
  std::int64_t max_positions = 0;   // max_position_embeddings
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  Llama3RopeScaling rope_scaling;
  bool qkv_bias = false;            // Qwen2: always; llama, qwen3: attention_bias
  bool o_bias = false;              // llama, qwen3: attention_bias
  bool mlp_bias = false;            // llama's mlp_bias
  bool qk_norm = false;             // Qwen3: RMSNorm of each head's queries and keys
  bool tie_word_embeddings = false;
  std::int64_t sliding_window = 0;  // 0: none (attention sees every earlier token)
  std::vector<std::int64_t> eos_token_ids;
  std::int64_t bos_token_id = -1;
  std::string torch_dtype;          // as config.json says: float32, bfloat16, float16 or ""
  std::string where;                // the file read, for messages
};

// The model types read, in the order the refusal of another lists them.
const std::vector<std::string>& decoder_model_types();

// Parses config.json's text; `where` names it in errors. Throws ConfigError (exit 2) naming the
// file and key for a missing or ill-typed key, an unknown model_type (listing the supported), heads
// not divisible by the KV heads, an activation other than silu, or a rope_scaling other than llama3.
DecoderConfig parse_decoder_config(const std::string& text, const std::string& where);

// Reads `path`: a config.json, or a directory that holds one. Throws ConfigError.
DecoderConfig read_decoder_config(const std::string& path);

// A model directory's generation_config.json: how transformers' generate() continues text with
// the model unless told otherwise.
struct GenerationDefaults {
  bool present = false;                     // the file was there
  bool do_sample = false;                   // false: greedy
  double temperature = 1.0;
  double top_p = 1.0;
  std::int64_t top_k = 50;                  // transformers' default when the file has none
  std::vector<std::int64_t> eos_token_ids;  // empty: config.json's
};

// Parses generation_config.json's text. Throws ConfigError naming `where` and the key for a value
// of the wrong type or range (temperature > 0, top_p in (0, 1], top_k >= 0, ids >= 0).
GenerationDefaults parse_generation_config(const std::string& text, const std::string& where);

// The generation_config.json of `model_dir` (a directory, or the config.json in one); present=false
// when there is none. Throws ConfigError.
GenerationDefaults read_generation_config(const std::string& model_dir);

// Where model.name=llama's config.json is: model.hf_config, else model.init_from's directory.
// Throws ConfigError when neither is set.
std::string decoder_config_path(const ModelConfig& config);

}  // namespace hpctrain::config
