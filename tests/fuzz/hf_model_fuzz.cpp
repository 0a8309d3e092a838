// The readers of a Hugging Face model directory's JSON: the input's first byte, modulo 3, picks
// what the rest is: 0, a config.json as model.name=llama reads it (config/decoder_config.h); 1, a
// model.safetensors.index.json (weights/hf_directory.h); 2, a generation_config.json. An accepted
// config must describe a shape the decoder can build (positive sizes, heads a multiple of the KV
// heads, an even head_dim); an accepted index names at least one tensor, each in a plain file
// name; accepted generation defaults sample with temperature > 0, top_p in (0, 1], top_k >= 0.
#include <filesystem>
#include <string>

#include "fuzz_target.h"
#include "hpctrain/config/decoder_config.h"
#include "hpctrain/core/error.h"
#include "hpctrain/weights/hf_directory.h"

namespace hpctrain::fuzz {
namespace {

const char* const kConfigs[] = {
    R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 16},
        "tie_word_embeddings": true, "eos_token_id": [2, 3], "bos_token_id": 1, "torch_dtype": "bfloat16"})",
    R"({"model_type": "qwen2", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 40, "use_sliding_window": false,
        "sliding_window": 32768, "max_window_layers": 21, "hidden_act": "silu", "eos_token_id": 2})",
    R"({"model_type": "qwen3", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2, "head_dim": 16,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 40, "attention_bias": false})",
    R"({"model_type": "mistral", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 1, "intermediate_size": 48, "sliding_window": null})",
};

const char* const kIndex = R"({"metadata": {"total_size": 1024},
    "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                   "model.norm.weight": "model-00002-of-00002.safetensors"}})";

const char* const kGenerationConfigs[] = {
    R"({"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128008, 128009],
        "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.45.0"})",
    R"({"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
        "repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20})",
    R"({"_from_model_config": true, "eos_token_id": 2})",
};

void check_accepted(const config::GenerationDefaults& g) {
  if (!(g.temperature > 0) || !(g.top_p > 0 && g.top_p <= 1) || g.top_k < 0) {
    throw std::logic_error("accepted generation defaults that cannot be sampled with");
  }
}

void check_accepted(const config::DecoderConfig& c) {
  const bool positive = c.vocab_size > 0 && c.hidden_size > 0 && c.layers > 0 && c.heads > 0 && c.kv_heads > 0 &&
                        c.head_dim > 0 && c.intermediate_size > 0 && c.max_positions > 0;
  if (!positive || c.heads % c.kv_heads != 0 || c.head_dim % 2 != 0) {
    throw std::logic_error("an accepted config.json describes a shape the decoder cannot build");
  }
}

}  // namespace

void write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  int i = 0;
  for (const char* config : kConfigs) {
    write_file(dir + "/config-" + std::to_string(i++) + ".json", std::string("\x00", 1) + config);
  }
  write_file(dir + "/index.json", std::string("\x01") + kIndex);
  i = 0;
  for (const char* generation : kGenerationConfigs) {
    write_file(dir + "/generation-" + std::to_string(i++) + ".json", std::string("\x02") + generation);
  }
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  fuzz::silence_logs();
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int kind = data[0] % 3;
  const bool index = kind == 1;
  try {
    if (index) {
      if (weights::parse_hf_index(text, "index").weight_map.empty()) throw std::logic_error("an empty index accepted");
    } else if (kind == 2) {
      fuzz::check_accepted(config::parse_generation_config(text, "generation_config.json"));
    } else {
      fuzz::check_accepted(config::parse_decoder_config(text, "config.json"));
    }
  } catch (const Error& e) {
    if (e.code() != (index ? ExitCode::kCheckpoint : ExitCode::kUsage)) throw;
    fuzz::record(fuzz::Outcome::kRefused);
    return 0;
  }
  fuzz::record(fuzz::Outcome::kAccepted);
  return 0;
}
