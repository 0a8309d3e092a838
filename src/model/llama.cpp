// llama: the decoder of the Llama family (model_type llama, qwen2, qwen3, mistral), its shape and
// variant from a Hugging Face config.json (config/decoder_config.h). Token embedding, then
// `layers` blocks of pre-RMSNorm grouped-query self-attention with rotary positions and a SwiGLU
// MLP, each added to the residual stream, a final RMSNorm and the output layer (the embedding's
// own weight when tie_word_embeddings). Qwen2 adds biases to q, k and v; Qwen3 normalizes each
// head's queries and keys. Parameters carry Hugging Face's names (model.layers.N.self_attn.q_proj,
// ...), so a model directory's tensors load without renaming.
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <fnmatch.h>
#include <limits>
#include <string>

#include "activation_checkpoint.h"
#include "builtin_models.h"
#include "hpctrain/config/decoder_config.h"
#include "hpctrain/core/error.h"
#include "hpctrain/model/language_model.h"
#include "hpctrain/model/parameter_memory.h"
#include "lora_adapter.h"
#include "rotary.h"

namespace hpctrain::model {
namespace {

namespace nn = torch::nn;

#define HT_FUSED_ATTENTION (TORCH_VERSION_MAJOR >= 2)

// x / sqrt(mean(x^2) + eps) in float32, scaled by a learned weight in x's dtype (Hugging Face's
// LlamaRMSNorm).
class RmsNormImpl : public nn::Module {
 public:
  RmsNormImpl(std::int64_t size, double eps) : eps_(eps), weight_(register_parameter("weight", torch::ones({size}))) {}

  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor wide = x.to(torch::kFloat);
    const at::Tensor normed = wide * torch::rsqrt(wide.pow(2).mean(-1, /*keepdim=*/true) + eps_);
    return weight_ * normed.to(x.scalar_type());
  }

  const at::Tensor& weight() const { return weight_; }

 private:
  double eps_;
  at::Tensor weight_;
};
TORCH_MODULE(RmsNorm);

// A Linear layer and the LoRA adapter it may get, under the module name it has in the model.
struct AdaptableLinear {
  std::string name;
  nn::Linear* layer;
  std::unique_ptr<LoraAdapter>* adapter;
};

nn::Linear linear(std::int64_t in, std::int64_t out, bool bias) {
  return nn::Linear(nn::LinearOptions(in, out).bias(bias));
}

class AttentionImpl : public nn::Module {
 public:
  explicit AttentionImpl(const config::DecoderConfig& c)
      : heads_(c.heads),
        kv_heads_(c.kv_heads),
        head_dim_(c.head_dim),
        q_proj_(register_module("q_proj", linear(c.hidden_size, c.heads * c.head_dim, c.qkv_bias))),
        k_proj_(register_module("k_proj", linear(c.hidden_size, c.kv_heads * c.head_dim, c.qkv_bias))),
        v_proj_(register_module("v_proj", linear(c.hidden_size, c.kv_heads * c.head_dim, c.qkv_bias))),
        o_proj_(register_module("o_proj", linear(c.heads * c.head_dim, c.hidden_size, c.o_bias))) {
    if (c.qk_norm) {
      q_norm_ = register_module("q_norm", RmsNorm(c.head_dim, c.rms_norm_eps));
      k_norm_ = register_module("k_norm", RmsNorm(c.head_dim, c.rms_norm_eps));
    }
  }

  // Causal attention over the sequence itself; `padding` (padding_mask's) when defined.
  at::Tensor forward(const at::Tensor& x, const RotaryAngles& angles, const at::Tensor& padding = {}) {
    const Heads h = project(x, angles);
    return output(x, attend(h.queries, h.keys, h.values, /*past=*/0, padding));
  }

  // The new tokens' attention over the cached ones and themselves; their keys and values (rotated,
  // one per KV head) are appended to `keys` and `values`.
  at::Tensor forward_cached(const at::Tensor& x, const RotaryAngles& angles, at::Tensor& keys, at::Tensor& values,
                            const at::Tensor& padding = {}) {
    const Heads h = project(x, angles);
    keys = keys.defined() ? torch::cat({keys, h.keys}, 2) : h.keys;
    values = values.defined() ? torch::cat({values, h.values}, 2) : h.values;
    return output(x, attend(h.queries, keys, values, keys.size(2) - x.size(1), padding));
  }

  void adaptable(const std::string& where, std::vector<AdaptableLinear>& out) {
    out.push_back({where + ".q_proj", &q_proj_, &q_lora_});
    out.push_back({where + ".k_proj", &k_proj_, &k_lora_});
    out.push_back({where + ".v_proj", &v_proj_, &v_lora_});
    out.push_back({where + ".o_proj", &o_proj_, &o_lora_});
  }

 private:
  struct Heads {
    at::Tensor queries;  // [B, heads, T, head_dim], rotated
    at::Tensor keys;     // [B, kv_heads, T, head_dim], rotated
    at::Tensor values;   // [B, kv_heads, T, head_dim]
  };

  Heads project(const at::Tensor& x, const RotaryAngles& angles) {
    const std::int64_t b = x.size(0);
    const std::int64_t t = x.size(1);
    at::Tensor q = adapted(q_proj_, q_lora_, x).view({b, t, heads_, head_dim_});
    at::Tensor k = adapted(k_proj_, k_lora_, x).view({b, t, kv_heads_, head_dim_});
    const at::Tensor v = adapted(v_proj_, v_lora_, x).view({b, t, kv_heads_, head_dim_}).transpose(1, 2);
    if (q_norm_) {
      q = q_norm_(q);
      k = k_norm_(k);
    }
    return {rotate(q.transpose(1, 2), angles), rotate(k.transpose(1, 2), angles), v};
  }

  // Each KV head serves heads / kv_heads consecutive query heads: query head i reads KV head
  // i / (heads / kv_heads).
  at::Tensor repeated(const at::Tensor& kv) const {
    if (kv_heads_ == heads_) return kv;
    const std::int64_t b = kv.size(0);
    const std::int64_t s = kv.size(2);
    return kv.unsqueeze(2).expand({b, kv_heads_, heads_ / kv_heads_, s, head_dim_}).reshape({b, heads_, s, head_dim_});
  }

  // Softmax(q k^T / sqrt(head_dim) + mask) v of queries [B, heads, T, head_dim] over keys and
  // values [B, kv_heads, past + T, head_dim], query i at position past + i seeing keys up to it;
  // `padding` (additive, [B, 1, 1, past + T]) masks what a batch's padding must not see. The
  // query heads of one KV head are one batch of rows against it: no copy of the keys per head.
  at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::int64_t past,
                    const at::Tensor& padding) const {
#if HT_FUSED_ATTENTION
    if (past == 0 && !padding.defined()) {
      return at::scaled_dot_product_attention(q, repeated(k), repeated(v), /*attn_mask=*/{}, 0.0, /*is_causal=*/true);
    }
#endif
    const std::int64_t b = q.size(0);
    const std::int64_t t = q.size(2);
    const std::int64_t group = heads_ / kv_heads_;
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
    at::Tensor scores = torch::matmul(q.reshape({b, kv_heads_, group * t, head_dim_}), k.transpose(-2, -1)).mul(scale);
    if (t > 1 || padding.defined()) {  // one new token sees every cached one
      at::Tensor mask = torch::full({t, past + t}, -std::numeric_limits<float>::infinity(), scores.options())
                            .triu(/*diagonal=*/past + 1);
      if (padding.defined()) mask = mask + padding.unsqueeze(1);
      scores = scores.view({b, kv_heads_, group, t, past + t}).add(mask).view({b, kv_heads_, group * t, past + t});
    }
    const at::Tensor weights = torch::softmax(scores, -1, torch::kFloat).to(q.scalar_type());
    return torch::matmul(weights, v).view({b, heads_, t, head_dim_});
  }

  at::Tensor output(const at::Tensor& x, const at::Tensor& heads) {
    const at::Tensor joined = heads.transpose(1, 2).reshape({x.size(0), x.size(1), heads_ * head_dim_});
    return adapted(o_proj_, o_lora_, joined);
  }

  std::int64_t heads_;
  std::int64_t kv_heads_;
  std::int64_t head_dim_;
  nn::Linear q_proj_;
  nn::Linear k_proj_;
  nn::Linear v_proj_;
  nn::Linear o_proj_;
  RmsNorm q_norm_{nullptr};
  RmsNorm k_norm_{nullptr};
  std::unique_ptr<LoraAdapter> q_lora_, k_lora_, v_lora_, o_lora_;
};
TORCH_MODULE(Attention);

// down(silu(gate(x)) * up(x)).
class SwiGluImpl : public nn::Module {
 public:
  explicit SwiGluImpl(const config::DecoderConfig& c)
      : gate_proj_(register_module("gate_proj", linear(c.hidden_size, c.intermediate_size, c.mlp_bias))),
        up_proj_(register_module("up_proj", linear(c.hidden_size, c.intermediate_size, c.mlp_bias))),
        down_proj_(register_module("down_proj", linear(c.intermediate_size, c.hidden_size, c.mlp_bias))) {}

  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor gated = torch::silu(adapted(gate_proj_, gate_lora_, x)) * adapted(up_proj_, up_lora_, x);
    return adapted(down_proj_, down_lora_, gated);
  }

  void adaptable(const std::string& where, std::vector<AdaptableLinear>& out) {
    out.push_back({where + ".gate_proj", &gate_proj_, &gate_lora_});
    out.push_back({where + ".up_proj", &up_proj_, &up_lora_});
    out.push_back({where + ".down_proj", &down_proj_, &down_lora_});
  }

 private:
  nn::Linear gate_proj_;
  nn::Linear up_proj_;
  nn::Linear down_proj_;
  std::unique_ptr<LoraAdapter> gate_lora_, up_lora_, down_lora_;
};
TORCH_MODULE(SwiGlu);

class DecoderLayerImpl : public nn::Module {
 public:
  explicit DecoderLayerImpl(const config::DecoderConfig& c)
      : input_layernorm_(register_module("input_layernorm", RmsNorm(c.hidden_size, c.rms_norm_eps))),
        self_attn_(register_module("self_attn", Attention(c))),
        post_attention_layernorm_(register_module("post_attention_layernorm", RmsNorm(c.hidden_size, c.rms_norm_eps))),
        mlp_(register_module("mlp", SwiGlu(c))) {}

  at::Tensor forward(at::Tensor x, const RotaryAngles& angles, const at::Tensor& padding = {}) {
    x = x + self_attn_->forward(input_layernorm_(x), angles, padding);
    return x + mlp_(post_attention_layernorm_(x));
  }

  at::Tensor forward_cached(at::Tensor x, const RotaryAngles& angles, at::Tensor& keys, at::Tensor& values,
                            const at::Tensor& padding = {}) {
    x = x + self_attn_->forward_cached(input_layernorm_(x), angles, keys, values, padding);
    return x + mlp_(post_attention_layernorm_(x));
  }

  void adaptable(const std::string& where, std::vector<AdaptableLinear>& out) {
    self_attn_->adaptable(where + ".self_attn", out);
    mlp_->adaptable(where + ".mlp", out);
  }

 private:
  RmsNorm input_layernorm_;
  Attention self_attn_;
  RmsNorm post_attention_layernorm_;
  SwiGlu mlp_;
};
TORCH_MODULE(DecoderLayer);

// model.lora_targets against a layer's module name: the name itself, its last dotted parts (PEFT's
// rule: "q_proj" names "model.layers.0.self_attn.q_proj"), a shell pattern with * ? [ ] on the
// whole name, or all-linear (PEFT's: every Linear layer but the output layer).
bool targeted(const std::string& target, const std::string& name) {
  if (target == "all-linear") return name != "lm_head";
  if (name == target || ends_with(name, "." + target)) return true;
  return fnmatch(target.c_str(), name.c_str(), 0) == 0;
}

// A batch's padding as an additive mask [B, 1, 1, S]: the lowest float where a key is padding, so
// that a padded query, which sees only padding, gets finite (meaningless) weights and no NaN.
at::Tensor padding_mask(const at::Tensor& keys) {
  const at::Tensor lowest = torch::full({}, std::numeric_limits<float>::lowest(), torch::kFloat).to(keys.device());
  return torch::where(keys, torch::zeros_like(lowest), lowest).view({keys.size(0), 1, 1, keys.size(1)});
}

class Llama final : public nn::Module, public Model, public CachedLanguageModel, public MaskedLanguageModel {
 public:
  Llama(const config::DecoderConfig& c, const config::ModelConfig& options, bool without_memory)
      : shape_(c),
        recompute_blocks_(options.activation_checkpointing),
        inverse_frequencies_(rotary_inverse_frequencies(c.head_dim, c.rope_theta, c.rope_scaling)),
        body_(register_module("model", std::make_shared<nn::Module>())) {
    // Without memory, one module's at a time: the file's values replace these, shard by shard.
    const auto made = [without_memory](const nn::Module& module) {
      if (without_memory) {
        for (const at::Tensor& p : module.parameters()) release_memory(p);
      }
    };
    embed_tokens_ = body_->register_module("embed_tokens", nn::Embedding(c.vocab_size, c.hidden_size));
    made(*embed_tokens_);
    auto layers = body_->register_module("layers", nn::ModuleList());
    for (std::int64_t i = 0; i < c.layers; ++i) {
      layers_.push_back(DecoderLayer(c));
      layers->push_back(layers_.back());
      made(*layers_.back());
    }
    norm_ = body_->register_module("norm", RmsNorm(c.hidden_size, c.rms_norm_eps));
    made(*norm_);
    if (!c.tie_word_embeddings) {
      lm_head_ = register_module("lm_head", linear(c.hidden_size, c.vocab_size, false));
      made(*lm_head_);
    }
    initialize();
  }

  at::Tensor forward(const at::Tensor& tokens) override {
    const std::int64_t t = tokens.size(1);
    HT_CHECK(t <= block_size(), "a sequence longer than the model's context");
    begin_forward();
    at::Tensor x = embed(tokens);
    const RotaryAngles angles = rotary_angles(inverse_frequencies_, 0, t, x.scalar_type(), x.device());
    for (size_t i = 0; i < layers_.size(); ++i) {
      x = run_block(i, [&] {
        if (!recompute_blocks_) return layers_[i]->forward(x, angles);
        return recomputed_in_backward(x, [layer = layers_[i], angles](const at::Tensor& h) mutable {
          return layer->forward(h, angles);
        });
      });
    }
    return end_forward(head(norm_(x)));
  }

  std::int64_t block_size() const override { return context_length(shape_); }

  at::Tensor forward_cached(const at::Tensor& tokens, KvCache& cache) override {
    const std::int64_t t = tokens.size(1);
    HT_CHECK(cache.length + t <= block_size(), "a cached forward past the model's context");
    cache.keys.resize(layers_.size());
    cache.values.resize(layers_.size());
    at::Tensor x = embed(tokens);
    const RotaryAngles angles = rotary_angles(inverse_frequencies_, cache.length, t, x.scalar_type(), x.device());
    for (size_t i = 0; i < layers_.size(); ++i) {
      x = layers_[i]->forward_cached(x, angles, cache.keys[i], cache.values[i]);
    }
    cache.length += t;
    return head(norm_(x));
  }

  at::Tensor forward_masked(const at::Tensor& tokens, const TokenMask& mask, KvCache* cache) override {
    const std::int64_t past = cache != nullptr ? cache->length : 0;
    HT_CHECK(mask.keys.size(1) == past + tokens.size(1) && mask.positions.sizes() == tokens.sizes(),
             "a token mask of another shape than the batch");
    HT_CHECK(past + tokens.size(1) <= block_size(), "a masked forward past the model's context");
    at::Tensor x = embed(tokens);
    const RotaryAngles angles = rotary_angles(inverse_frequencies_, mask.positions, x.scalar_type(), x.device());
    const at::Tensor padding = padding_mask(mask.keys.to(x.device()));
    if (cache != nullptr) {
      cache->keys.resize(layers_.size());
      cache->values.resize(layers_.size());
    }
    for (size_t i = 0; i < layers_.size(); ++i) {
      x = cache != nullptr ? layers_[i]->forward_cached(x, angles, cache->keys[i], cache->values[i], padding)
                           : layers_[i]->forward(x, angles, padding);
    }
    if (cache != nullptr) cache->length += tokens.size(1);
    return head(norm_(x));
  }

  nn::Module& module() override { return *this; }

  std::vector<TiedParameter> tied_parameters() const override {
    if (!shape_.tie_word_embeddings) return {};
    return {{"lm_head.weight", "model.embed_tokens.weight", embed_tokens_->weight}};
  }

  // The decoder layers; the embedding, the final norm and the output layer stay whole.
  std::vector<std::shared_ptr<nn::Module>> blocks() override {
    std::vector<std::shared_ptr<nn::Module>> out;
    for (const DecoderLayer& layer : layers_) out.push_back(layer.ptr());
    return out;
  }

  bool add_adapters(const LoraOptions& options, const std::set<std::string>& targets) override {
    std::vector<AdaptableLinear> layers;
    for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->adaptable("model.layers." + std::to_string(i), layers);
    std::set<std::string> unused = targets;
    for (const AdaptableLinear& l : layers) {
      if (!any_target(targets, l.name, unused)) continue;
      const at::Tensor& w = (*l.layer)->weight;
      *l.adapter = std::make_unique<LoraAdapter>(**l.layer, l.name, w.size(1), w.size(0), options);
    }
    if (any_target(targets, "lm_head", unused)) {
      if (!lm_head_) lm_head_holder_ = register_module("lm_head", std::make_shared<nn::Module>());
      nn::Module& owner = lm_head_ ? *lm_head_.ptr() : *lm_head_holder_;
      head_lora_ = std::make_unique<LoraAdapter>(owner, "lm_head", shape_.hidden_size, shape_.vocab_size, options);
    }
    if (!unused.empty()) {
      throw ConfigError("model.lora_targets: '" + *unused.begin() + "' names no layer of the llama model; use module "
                        "names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head), patterns "
                        "on whole names ('model.layers.1*.mlp.*') or all-linear");
    }
    return true;
  }

 private:
  static bool any_target(const std::set<std::string>& targets, const std::string& name, std::set<std::string>& unused) {
    bool hit = false;
    for (const std::string& target : targets) {
      if (!targeted(target, name)) continue;
      hit = true;
      unused.erase(target);
    }
    return hit;
  }

  // The residual stream's start, in the norms' dtype (float32 also when the embedding is a bf16
  // base's).
  at::Tensor embed(const at::Tensor& tokens) { return embed_tokens_(tokens).to(norm_->weight().scalar_type()); }

  at::Tensor head(const at::Tensor& x) {
    const at::Tensor logits = lm_head_ ? base_linear(x, lm_head_->weight) : base_linear(x, embed_tokens_->weight);
    return head_lora_ ? logits + (*head_lora_)(x) : logits;
  }

  // Hugging Face's initialization of these models: N(0, 0.02) matrices and embeddings, zero
  // biases, unit norms.
  void initialize() {
    const torch::NoGradGuard no_grad;
    for (auto& module : modules(/*include_self=*/false)) {
      if (auto* linear = module->as<nn::Linear>()) {
        if (lacks_memory(linear->weight)) continue;
        linear->weight.normal_(0.0, 0.02);
        if (linear->bias.defined()) linear->bias.zero_();
      } else if (auto* embedding = module->as<nn::Embedding>(); embedding && !lacks_memory(embedding->weight)) {
        embedding->weight.normal_(0.0, 0.02);
      }
    }
  }

  config::DecoderConfig shape_;
  bool recompute_blocks_;  // model.activation_checkpointing
  at::Tensor inverse_frequencies_;
  std::shared_ptr<nn::Module> body_;
  nn::Embedding embed_tokens_{nullptr};
  std::vector<DecoderLayer> layers_;
  RmsNorm norm_{nullptr};
  nn::Linear lm_head_{nullptr};
  std::shared_ptr<nn::Module> lm_head_holder_;  // the tied output layer's adapter
  std::unique_ptr<LoraAdapter> head_lora_;
};

}  // namespace

std::int64_t context_length(const config::DecoderConfig& c) {
  return c.sliding_window > 0 ? std::min(c.sliding_window, c.max_positions) : c.max_positions;
}

std::shared_ptr<Model> make_llama(const config::ModelConfig& config, const ModelSpec& spec) {
  const config::DecoderConfig shape = config::read_decoder_config(config::decoder_config_path(config));
  if (spec.num_classes > shape.vocab_size) {
    throw ConfigError("data.path's tokens take " + std::to_string(spec.num_classes) + " values, more than " +
                      shape.where + "'s vocab_size " + std::to_string(shape.vocab_size) +
                      ": tokenize the data with the model's tokenizer");
  }
  if (spec.input_shape.size() != 1) {
    throw ConfigError("model llama reads windows of model.gpt_block_size tokens from a token stream; this data has "
                      "samples of another shape");
  }
  if (spec.input_shape[0] > context_length(shape)) {
    throw ConfigError("model.gpt_block_size=" + std::to_string(spec.input_shape[0]) + " is longer than " + shape.where +
                      (shape.sliding_window > 0 ? "'s sliding_window " : "'s max_position_embeddings ") +
                      std::to_string(context_length(shape)) + "; use at most that many tokens per window");
  }
  return std::make_shared<Llama>(shape, config, spec.parameters_without_memory);
}

}  // namespace hpctrain::model
