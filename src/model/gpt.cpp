// gpt: a decoder-only transformer (GPT-2's layout): token and position embeddings, n_layer blocks
// of pre-LayerNorm causal self-attention and a GELU MLP, each added to the residual stream, a
// final LayerNorm, and logits from the token embedding's own weights (weight tying). Parameter
// names follow GPT-2's as nanoGPT writes them (transformer.wte, transformer.h.<i>.attn.c_attn,
// ...), so an exported state_dict maps onto that code. Input [B, T] token ids, T <= block_size;
// output [B, T, vocab] logits of the next token at each place.
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "builtin_models.h"
#include "hpctrain/model/language_model.h"
#include "hpctrain/core/error.h"
#include "activation_checkpoint.h"
#include "lora_adapter.h"

namespace hpctrain::model {
namespace {

namespace nn = torch::nn;

// libtorch 2 has scaled_dot_product_attention: one fused kernel (flash or memory-efficient
// attention on CUDA) in place of the scores, mask, softmax and weighted sum below, with the causal
// mask its own and the same result. libtorch 1.13 computes those steps one by one.
#define HT_FUSED_ATTENTION (TORCH_VERSION_MAJOR >= 2)

class CausalSelfAttentionImpl : public nn::Module {
 public:
  CausalSelfAttentionImpl(std::int64_t embd, std::int64_t heads, double dropout)
      : heads_(heads),
        c_attn_(register_module("c_attn", nn::Linear(embd, 3 * embd))),
        c_proj_(register_module("c_proj", nn::Linear(embd, embd))),
        attn_dropout_(register_module("attn_dropout", nn::Dropout(dropout))),
        resid_dropout_(register_module("resid_dropout", nn::Dropout(dropout))) {}

  // `mask`: [T, T], 0 on and below the diagonal, -inf above it (no look at later tokens); undefined
  // with fused attention, which masks by itself.
  at::Tensor forward(const at::Tensor& x, [[maybe_unused]] const at::Tensor& mask) {
    const std::int64_t b = x.size(0);
    const std::int64_t t = x.size(1);
    const std::int64_t c = x.size(2);
    const std::vector<at::Tensor> qkv = queries_keys_values(x);
    const at::Tensor& q = qkv[0];
    const at::Tensor& k = qkv[1];
    const at::Tensor& v = qkv[2];
#if HT_FUSED_ATTENTION
    const double dropout = is_training() ? attn_dropout_->options.p() : 0.0;
    const at::Tensor y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout, /*is_causal=*/true)
                             .transpose(1, 2)
                             .contiguous()
                             .view({b, t, c});
#else
    const double scale = 1.0 / std::sqrt(static_cast<double>(c / heads_));
    at::Tensor att = torch::matmul(q, k.transpose(-2, -1)).mul(scale).add(mask);
    att = attn_dropout_(torch::softmax(att, -1));
    const at::Tensor y = torch::matmul(att, v).transpose(1, 2).contiguous().view({b, t, c});
#endif
    return resid_dropout_(adapted(c_proj_, c_proj_lora_, y));
  }

  // The new tokens' attention over the cached ones and themselves; their keys and values are
  // appended to `keys` and `values`. Query i sits at position `past + i` and sees keys up to it.
  at::Tensor forward_cached(const at::Tensor& x, at::Tensor& keys, at::Tensor& values) {
    const std::int64_t b = x.size(0);
    const std::int64_t t = x.size(1);
    const std::int64_t c = x.size(2);
    const std::vector<at::Tensor> qkv = queries_keys_values(x);
    const at::Tensor& q = qkv[0];
    keys = keys.defined() ? torch::cat({keys, qkv[1]}, 2) : qkv[1];
    values = values.defined() ? torch::cat({values, qkv[2]}, 2) : qkv[2];
    const std::int64_t past = keys.size(2) - t;
    const double scale = 1.0 / std::sqrt(static_cast<double>(c / heads_));
    at::Tensor att = torch::matmul(q, keys.transpose(-2, -1)).mul(scale);
    const at::Tensor mask = torch::full({t, past + t}, -std::numeric_limits<float>::infinity(), att.options())
                                .triu(/*diagonal=*/past + 1);
    att = torch::softmax(att.add(mask), -1);
    return adapted(c_proj_, c_proj_lora_, torch::matmul(att, values).transpose(1, 2).contiguous().view({b, t, c}));
  }

  nn::Linear& c_proj() { return c_proj_; }

  void add_adapters(const LoraOptions& options, const std::set<std::string>& targets, const std::string& where) {
    const std::int64_t c = c_proj_->weight.size(0);
    if (targets.count("attn") != 0) {
      c_attn_lora_ = std::make_unique<LoraAdapter>(*c_attn_, where + ".c_attn", c, 3 * c, options);
    }
    if (targets.count("proj") != 0) {
      c_proj_lora_ = std::make_unique<LoraAdapter>(*c_proj_, where + ".c_proj", c, c, options);
    }
  }

 private:
  // The queries, keys and values of `x` [B, T, C], each [B, heads, T, C / heads].
  std::vector<at::Tensor> queries_keys_values(const at::Tensor& x) {
    const std::int64_t b = x.size(0);
    const std::int64_t t = x.size(1);
    const std::int64_t c = x.size(2);
    std::vector<at::Tensor> qkv = adapted(c_attn_, c_attn_lora_, x).split(c, /*dim=*/2);
    for (at::Tensor& y : qkv) y = y.view({b, t, heads_, c / heads_}).transpose(1, 2);
    return qkv;
  }

  std::int64_t heads_;
  nn::Linear c_attn_;
  nn::Linear c_proj_;
  nn::Dropout attn_dropout_;
  nn::Dropout resid_dropout_;
  std::unique_ptr<LoraAdapter> c_attn_lora_;
  std::unique_ptr<LoraAdapter> c_proj_lora_;
};
TORCH_MODULE(CausalSelfAttention);

class MlpBlockImpl : public nn::Module {
 public:
  MlpBlockImpl(std::int64_t embd, double dropout, std::string gelu)
      : gelu_(std::move(gelu)),
        c_fc_(register_module("c_fc", nn::Linear(embd, 4 * embd))),
        c_proj_(register_module("c_proj", nn::Linear(4 * embd, embd))),
        dropout_(register_module("dropout", nn::Dropout(dropout))) {}

  at::Tensor forward(const at::Tensor& x) {
    return dropout_(adapted(c_proj_, c_proj_lora_, torch::gelu(adapted(c_fc_, c_fc_lora_, x), gelu_)));
  }

  nn::Linear& c_proj() { return c_proj_; }

  void add_adapters(const LoraOptions& options, const std::set<std::string>& targets, const std::string& where) {
    const std::int64_t c = c_fc_->weight.size(1);
    if (targets.count("fc") != 0) {
      c_fc_lora_ = std::make_unique<LoraAdapter>(*c_fc_, where + ".c_fc", c, 4 * c, options);
    }
    if (targets.count("mlp_proj") != 0) {
      c_proj_lora_ = std::make_unique<LoraAdapter>(*c_proj_, where + ".c_proj", 4 * c, c, options);
    }
  }

 private:
  std::string gelu_;  // torch::gelu's `approximate`: "none" or "tanh"
  nn::Linear c_fc_;
  nn::Linear c_proj_;
  nn::Dropout dropout_;
  std::unique_ptr<LoraAdapter> c_fc_lora_;
  std::unique_ptr<LoraAdapter> c_proj_lora_;
};
TORCH_MODULE(MlpBlock);

class BlockImpl : public nn::Module {
 public:
  BlockImpl(std::int64_t embd, std::int64_t heads, double dropout, const std::string& gelu)
      : ln_1_(register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({embd})))),
        attn_(register_module("attn", CausalSelfAttention(embd, heads, dropout))),
        ln_2_(register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({embd})))),
        mlp_(register_module("mlp", MlpBlock(embd, dropout, gelu))) {}

  at::Tensor forward(at::Tensor x, const at::Tensor& mask) {
    x = x + attn_->forward(ln_1_(x), mask);
    return x + mlp_(ln_2_(x));
  }

  at::Tensor forward_cached(at::Tensor x, at::Tensor& keys, at::Tensor& values) {
    x = x + attn_->forward_cached(ln_1_(x), keys, values);
    return x + mlp_(ln_2_(x));
  }

  // The two projections into the residual stream, initialized smaller (GPT-2, section 2.3).
  std::vector<at::Tensor> residual_projections() { return {attn_->c_proj()->weight, mlp_->c_proj()->weight}; }

  void add_adapters(const LoraOptions& options, const std::set<std::string>& targets, const std::string& where) {
    attn_->add_adapters(options, targets, where + ".attn");
    mlp_->add_adapters(options, targets, where + ".mlp");
  }

 private:
  nn::LayerNorm ln_1_;
  CausalSelfAttention attn_;
  nn::LayerNorm ln_2_;
  MlpBlock mlp_;
};
TORCH_MODULE(Block);

class Gpt final : public nn::Module, public Model, public CachedLanguageModel {
 public:
  Gpt(std::int64_t vocab, const config::ModelConfig& config)
      : block_size_(config.gpt_block_size),
        recompute_blocks_(config.activation_checkpointing),
        transformer_(register_module("transformer", std::make_shared<nn::Module>())) {
    const std::int64_t embd = config.gpt_embd;
    // auto is resolved with the weights' names (weights::resolve_gpt_activation) before a model
    // is built from them; left as auto, there are none: the exact GELU.
    HT_CHECK(config.gpt_activation != config::GptActivation::kAuto || config.init_from.empty(),
             "model.gpt_activation=auto reached the gpt unresolved, with model.init_from " + config.init_from);
    const std::string gelu = config.gpt_activation == config::GptActivation::kGeluTanh ? "tanh" : "none";
    wte_ = transformer_->register_module("wte", nn::Embedding(vocab, embd));
    wpe_ = transformer_->register_module("wpe", nn::Embedding(block_size_, embd));
    drop_ = transformer_->register_module("drop", nn::Dropout(config.dropout));
    auto h = transformer_->register_module("h", nn::ModuleList());
    for (std::int64_t i = 0; i < config.gpt_layers; ++i) {
      blocks_.push_back(Block(embd, config.gpt_heads, config.dropout, gelu));
      h->push_back(blocks_.back());
    }
    ln_f_ = transformer_->register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({embd})));
    initialize(config.gpt_layers);
  }

  at::Tensor forward(const at::Tensor& tokens) override {
    const std::int64_t t = tokens.size(1);
    HT_CHECK(t <= block_size_, "a sequence longer than the model's block size");
    begin_forward();
    const at::Tensor positions = torch::arange(t, torch::dtype(torch::kLong).device(tokens.device()));
    at::Tensor x = drop_(embed(tokens, positions));
#if HT_FUSED_ATTENTION
    const at::Tensor mask;
#else
    const at::Tensor mask =
        torch::full({t, t}, -std::numeric_limits<float>::infinity(), x.options()).triu(/*diagonal=*/1);
#endif
    for (size_t i = 0; i < blocks_.size(); ++i) {
      x = run_block(i, [&] {
        if (!recompute_blocks_) return blocks_[i]->forward(x, mask);
        return recomputed_in_backward(x, [block = blocks_[i], mask](const at::Tensor& h) mutable {
          return block->forward(h, mask);
        });
      });
    }
    return end_forward(head(ln_f_(x)));
  }

  std::int64_t block_size() const override { return block_size_; }

  at::Tensor forward_cached(const at::Tensor& tokens, KvCache& cache) override {
    const std::int64_t t = tokens.size(1);
    HT_CHECK(cache.length + t <= block_size_, "a cached forward past the model's block size");
    cache.keys.resize(blocks_.size());
    cache.values.resize(blocks_.size());
    const at::Tensor positions =
        torch::arange(cache.length, cache.length + t, torch::dtype(torch::kLong).device(tokens.device()));
    at::Tensor x = drop_(embed(tokens, positions));
    for (size_t i = 0; i < blocks_.size(); ++i) x = blocks_[i]->forward_cached(x, cache.keys[i], cache.values[i]);
    cache.length += t;
    return head(ln_f_(x));
  }

  nn::Module& module() override { return *this; }

  bool add_adapters(const LoraOptions& options, const std::set<std::string>& targets) override {
    for (size_t i = 0; i < blocks_.size(); ++i) {
      blocks_[i]->add_adapters(options, targets, "transformer.h." + std::to_string(i));
    }
    if (targets.count("head") != 0) {
      // PEFT's name for GPT-2's output layer, which here is the token embedding's weight.
      auto lm_head = register_module("lm_head", std::make_shared<nn::Module>());
      head_lora_ = std::make_unique<LoraAdapter>(*lm_head, "lm_head", wte_->weight.size(1), wte_->weight.size(0),
                                                 options);
    }
    return true;
  }

  // The transformer blocks; the embeddings (the token embedding is also the output layer) and
  // the final LayerNorm stay whole through a step.
  std::vector<std::shared_ptr<nn::Module>> blocks() override {
    std::vector<std::shared_ptr<nn::Module>> out;
    for (const Block& block : blocks_) out.push_back(block.ptr());
    return out;
  }

 private:
  // The residual stream's start, in float32 also when the embeddings are bf16 (a LoRA base's).
  at::Tensor embed(const at::Tensor& tokens, const at::Tensor& positions) {
    return (wte_(tokens) + wpe_(positions)).to(ln_f_->weight.scalar_type());
  }

  // The logits of the final LayerNorm's output `x`. Tied: the output layer is the embedding.
  // Note [Padded vocabulary]: GPT-2's 50,257 rows make each product with the output layer
  // misaligned (rows of odd length), which sends cuBLAS to its slowest kernels: on an H200 the
  // three products took 15 ms of a 50 ms bf16 step (docs/benchmarks-history.md, "GPU efficiency"). On a
  // GPU the product runs on the weight padded with zero rows to a multiple of 64, as nanoGPT
  // pads its vocabulary, and the logits are its first `vocab` columns: the same values, from a
  // parameter of GPT-2's own shape. Generating a token at a time keeps the plain product rather
  // than copy the weight for every token; the threshold of 1,024 positions is not tuned.
  at::Tensor head(const at::Tensor& x) {
    const bool pad = x.is_cuda() && x.numel() / x.size(-1) >= 1024;
    at::Tensor logits = pad ? padded_rows_linear(x, wte_->weight, 64) : base_linear(x, wte_->weight);
    return head_lora_ ? logits + (*head_lora_)(x) : logits;
  }

  // GPT-2's initialization: N(0, 0.02) weights, zero biases, and the residual projections scaled
  // by 1/sqrt(2 n_layer) so the residual stream's variance does not grow with depth.
  void initialize(std::int64_t layers) {
    const torch::NoGradGuard no_grad;
    for (auto& module : modules(/*include_self=*/false)) {
      if (auto* linear = module->as<nn::Linear>()) {
        linear->weight.normal_(0.0, 0.02);
        if (linear->bias.defined()) linear->bias.zero_();
      } else if (auto* embedding = module->as<nn::Embedding>()) {
        embedding->weight.normal_(0.0, 0.02);
      }
    }
    for (auto& block : blocks_) {
      for (at::Tensor& weight : block->residual_projections()) {
        weight.normal_(0.0, 0.02 / std::sqrt(2.0 * static_cast<double>(layers)));
      }
    }
  }

  std::int64_t block_size_;
  bool recompute_blocks_;  // model.activation_checkpointing
  std::shared_ptr<nn::Module> transformer_;
  nn::Embedding wte_{nullptr};
  nn::Embedding wpe_{nullptr};
  nn::Dropout drop_{nullptr};
  std::vector<Block> blocks_;
  nn::LayerNorm ln_f_{nullptr};
  std::unique_ptr<LoraAdapter> head_lora_;
};

}  // namespace

std::shared_ptr<Model> make_gpt(const config::ModelConfig& config, const ModelSpec& spec) {
  if (config.gpt_layers < 1 || config.gpt_embd < 1 || config.gpt_block_size < 1) {
    throw ConfigError("model.gpt_layers, model.gpt_embd and model.gpt_block_size must be at least 1 (0 takes the "
                      "value from model.init_from's weights, and none are given)");
  }
  if (spec.input_shape.size() != 1 || spec.input_shape[0] != config.gpt_block_size) {
    throw ConfigError("model gpt reads windows of model.gpt_block_size=" + std::to_string(config.gpt_block_size) +
                      " tokens from a token stream (hpctrain prepare text); this data has samples of another "
                      "shape");
  }
  if (config.gpt_embd % config.gpt_heads != 0) {
    throw ConfigError("model.gpt_embd=" + std::to_string(config.gpt_embd) + " must be a multiple of model.gpt_heads=" +
                      std::to_string(config.gpt_heads) + " (each head gets gpt_embd / gpt_heads channels)");
  }
  return std::make_shared<Gpt>(spec.num_classes, config);
}

}  // namespace hpctrain::model
