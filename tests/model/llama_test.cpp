// The llama model on its own: Hugging Face's parameter names, the KV cache against the whole
// forward, recomputed blocks against kept ones, and the shapes it refuses.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "config_error.h"
#include "hpctrain/core/system.h"
#include "hpctrain/model/language_model.h"
#include "hpctrain/model/model.h"

namespace hpctrain::model {
namespace {

namespace fs = std::filesystem;
using hpctrain::testing::config_error;

class LlamaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("hpctrain_llama_" + std::to_string(::getpid()))).string();
    fs::create_directories(dir_);
  }
  void TearDown() override { sys::remove_tree(dir_); }

  config::ModelConfig options(const std::string& extra_json, const std::string& model_type = "qwen3") {
    std::ofstream(dir_ + "/config.json")
        << R"({"model_type": ")" << model_type << R"(", "vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 24,
               "max_position_embeddings": 32)"
        << extra_json << "}";
    config::ModelConfig c;
    c.name = config::ModelName::kLlama;
    c.hf_config = dir_;
    c.gpt_block_size = 16;
    return c;
  }

  std::string dir_;
};

std::vector<std::string> names(Model& model) {
  std::vector<std::string> out;
  for (const auto& p : model.module().named_parameters()) out.push_back(p.key());
  return out;
}

TEST_F(LlamaTest, ParametersCarryHuggingFacesNames) {
  torch::manual_seed(1);
  const auto separate = make_model(options(R"(, "tie_word_embeddings": false)"), {{16}, 64, true});
  const std::vector<std::string> n = names(*separate);
  for (const char* expected :
       {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.k_norm.weight",
        "model.layers.1.mlp.gate_proj.weight", "model.layers.0.post_attention_layernorm.weight", "model.norm.weight",
        "lm_head.weight"}) {
    EXPECT_NE(std::find(n.begin(), n.end(), expected), n.end()) << expected;
  }
  EXPECT_EQ(separate->blocks().size(), 2u);
  EXPECT_TRUE(separate->tied_parameters().empty());
  const auto tied = make_model(options(R"(, "tie_word_embeddings": true)"), {{16}, 64, true});
  const std::vector<std::string> t = names(*tied);
  EXPECT_EQ(std::find(t.begin(), t.end(), "lm_head.weight"), t.end());
  ASSERT_EQ(tied->tied_parameters().size(), 1u);
  EXPECT_EQ(tied->tied_parameters()[0].same_as, "model.embed_tokens.weight");
}

TEST_F(LlamaTest, TheCachedForwardEqualsTheWholeOne) {
  torch::manual_seed(2);
  const auto model = make_model(options(""), {{16}, 64, true});
  model->module().eval();
  const torch::NoGradGuard no_grad;
  const at::Tensor tokens = torch::randint(0, 64, {2, 12}, torch::kLong);
  const at::Tensor whole = model->forward(tokens);
  auto* cached = dynamic_cast<CachedLanguageModel*>(model.get());
  ASSERT_NE(cached, nullptr);
  KvCache cache;
  const at::Tensor first = cached->forward_cached(tokens.narrow(1, 0, 7), cache);
  const at::Tensor rest = cached->forward_cached(tokens.narrow(1, 7, 5), cache);
  EXPECT_EQ(cache.length, 12);
  EXPECT_EQ(cache.keys[0].size(1), 2);  // one per KV head, not per query head
  EXPECT_TRUE(torch::allclose(torch::cat({first, rest}, 1), whole, 1e-5, 1e-6));
  EXPECT_EQ(cached->block_size(), 32);
}

TEST_F(LlamaTest, RecomputedBlocksGiveTheSameGradients) {
  std::vector<at::Tensor> gradients[2];
  for (const bool recompute : {false, true}) {
    torch::manual_seed(3);
    config::ModelConfig c = options("");
    c.activation_checkpointing = recompute;
    const auto model = make_model(c, {{16}, 64, true});
    const at::Tensor tokens = torch::randint(0, 64, {2, 16}, torch::kLong);
    model->forward(tokens).pow(2).mean().backward();
    for (const auto& p : model->module().parameters()) gradients[recompute ? 1 : 0].push_back(p.grad().clone());
  }
  ASSERT_EQ(gradients[0].size(), gradients[1].size());
  for (size_t i = 0; i < gradients[0].size(); ++i) EXPECT_TRUE(torch::equal(gradients[0][i], gradients[1][i])) << i;
}

TEST_F(LlamaTest, RefusesWindowsAndVocabulariesItCannotHold) {
  config::ModelConfig longer = options("");
  longer.gpt_block_size = 33;
  EXPECT_NE(config_error([&] { make_model(longer, {{33}, 64, true}); })
                .find("model.gpt_block_size=33 is longer than " + dir_ + "/config.json's max_position_embeddings 32"),
            std::string::npos);
  EXPECT_NE(config_error([&] { make_model(options(""), {{16}, 65, true}); }).find("more than"), std::string::npos);
  const config::ModelConfig mistral = options(R"(, "sliding_window": 8)", "mistral");
  EXPECT_NE(config_error([&] { make_model(mistral, {{16}, 64, true}); }).find("'s sliding_window 8"),
            std::string::npos);
  config::ModelConfig none;
  none.name = config::ModelName::kLlama;
  EXPECT_NE(config_error([&] { make_model(none, {{16}, 64, true}); }).find("set model.init_from to a model directory"),
            std::string::npos);
}

}  // namespace
}  // namespace hpctrain::model
