#include "hpctrain/config/decoder_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "config_error.h"

namespace hpctrain::config {
namespace {

using hpctrain::testing::config_error;
using Json = nlohmann::json;

Json llama() {
  return {{"model_type", "llama"},       {"vocab_size", 256},       {"hidden_size", 64},
          {"num_hidden_layers", 2},       {"num_attention_heads", 8}, {"num_key_value_heads", 2},
          {"intermediate_size", 128}};
}

DecoderConfig parse(const Json& json) { return parse_decoder_config(json.dump(), "dir/config.json"); }

std::string refusal(const Json& json) {
  return config_error([&] { parse(json); });
}

TEST(DecoderConfigTest, DefaultsFollowEachFamilysConfigClass) {
  const DecoderConfig l = parse(llama());
  EXPECT_EQ(l.head_dim, 8);  // hidden / heads
  EXPECT_EQ(l.max_positions, 2048);
  EXPECT_DOUBLE_EQ(l.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(l.rms_norm_eps, 1e-6);
  EXPECT_FALSE(l.qkv_bias || l.o_bias || l.qk_norm || l.tie_word_embeddings || l.rope_scaling.enabled);

  Json qwen2 = llama();
  qwen2["model_type"] = "qwen2";
  const DecoderConfig q2 = parse(qwen2);
  EXPECT_TRUE(q2.qkv_bias);  // always, with no key saying so
  EXPECT_FALSE(q2.o_bias);
  EXPECT_EQ(q2.max_positions, 32768);

  Json qwen3 = llama();
  qwen3["model_type"] = "qwen3";
  qwen3["attention_bias"] = true;
  const DecoderConfig q3 = parse(qwen3);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(q3.head_dim, 128);  // Qwen3Config's default, not hidden / heads
  EXPECT_TRUE(q3.qkv_bias && q3.o_bias);

  Json mistral = llama();
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = 4096;
  mistral["attention_bias"] = true;  // not a key of MistralConfig: no biases
  const DecoderConfig m = parse(mistral);
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_FALSE(m.qkv_bias || m.o_bias);
}

TEST(DecoderConfigTest, ReadsLlama3RopeScalingAndEosLists) {
  Json j = llama();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  j["eos_token_id"] = {128001, 128008, 128009};
  j["bos_token_id"] = 128000;
  j["head_dim"] = 16;
  const DecoderConfig c = parse(j);
  EXPECT_TRUE(c.rope_scaling.enabled);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_positions, 8192);
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.head_dim, 16);
  j["rope_scaling"] = {{"type", "default"}};
  EXPECT_FALSE(parse(j).rope_scaling.enabled);
}

TEST(DecoderConfigTest, RefusesWhatItCannotBuildInOneLine) {
  Json missing = llama();
  missing.erase("intermediate_size");
  EXPECT_EQ(refusal(missing),
            "dir/config.json: missing \"intermediate_size\" (an integer), which the model's shape needs");
  Json unknown = llama();
  unknown["model_type"] = "gemma2";
  EXPECT_EQ(refusal(unknown),
            "dir/config.json: model_type \"gemma2\" is not supported; model.name=llama reads llama, qwen2, qwen3, "
            "mistral");
  Json groups = llama();
  groups["num_key_value_heads"] = 3;
  EXPECT_NE(refusal(groups).find("num_attention_heads=8 is not a multiple of num_key_value_heads=3"),
            std::string::npos);
  Json activation = llama();
  activation["hidden_act"] = "gelu";
  EXPECT_NE(refusal(activation).find("hidden_act \"gelu\" is not supported"), std::string::npos);
  Json yarn = llama();
  yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_NE(refusal(yarn).find("rope_scaling of type \"yarn\" is not supported"), std::string::npos);
  Json typed = llama();
  typed["hidden_size"] = "64";
  EXPECT_NE(refusal(typed).find("\"hidden_size\" is \"64\"; it must be an integer"), std::string::npos);
  Json sliding = llama();
  sliding["model_type"] = "qwen2";
  sliding["use_sliding_window"] = true;
  EXPECT_NE(refusal(sliding).find("\"use_sliding_window\": true is not supported"), std::string::npos);
  EXPECT_NE(config_error([] { parse_decoder_config("{\"model_type\": ", "c.json"); }).find("c.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(config_error([] { read_decoder_config("/nonexistent/model"); }).find("cannot read the model's config.json"),
            std::string::npos);
}

// generation_config.json as transformers reads it: greedy unless do_sample, top_k 50 when unsaid.
TEST(GenerationConfigTest, ReadsTransformersDefaultsAndRefusesWhatCannotBeSampled) {
  const GenerationDefaults g = parse_generation_config(
      R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9, "eos_token_id": [128001, 128009]})", "g.json");
  EXPECT_TRUE(g.present && g.do_sample);
  EXPECT_DOUBLE_EQ(g.temperature, 0.6);
  EXPECT_DOUBLE_EQ(g.top_p, 0.9);
  EXPECT_EQ(g.top_k, 50);
  EXPECT_EQ(g.eos_token_ids, (std::vector<std::int64_t>{128001, 128009}));
  const GenerationDefaults plain = parse_generation_config(R"({"eos_token_id": 2, "temperature": null})", "g.json");
  EXPECT_FALSE(plain.do_sample);
  EXPECT_DOUBLE_EQ(plain.temperature, 1.0);
  EXPECT_EQ(plain.eos_token_ids, (std::vector<std::int64_t>{2}));
  EXPECT_NE(config_error([] { parse_generation_config(R"({"top_p": 1.5})", "g.json"); })
                .find("g.json: \"top_p\" is 1.500000; it must be in (0, 1]"),
            std::string::npos);
  EXPECT_NE(config_error([] { parse_generation_config(R"({"do_sample": "yes"})", "g.json"); })
                .find("\"do_sample\" is \"yes\"; it must be true or false"),
            std::string::npos);
  EXPECT_FALSE(read_generation_config("/nonexistent/model").present);
}

}  // namespace
}  // namespace hpctrain::config
