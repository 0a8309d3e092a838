// What generation asks of a language model beyond Model::forward: its context length, and, where
// the model can (gpt), a forward of new tokens that attends to the keys and values of the tokens
// before them (a KV cache) instead of recomputing them. Depends on ATen's tensor type.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "hpctrain/config/decoder_config.h"

namespace hpctrain::model {

// A llama model's longest sequence: max_position_embeddings, or Mistral's sliding window when
// shorter (attention limited to the window is not implemented, so no sequence may exceed it).
std::int64_t context_length(const config::DecoderConfig& c);

// Every attention layer's keys and values of the tokens seen so far, [B, heads, length, head_dim].
struct KvCache {
  std::vector<at::Tensor> keys;
  std::vector<at::Tensor> values;
  std::int64_t length = 0;  // tokens cached

  void clear() { *this = KvCache{}; }
};

class CachedLanguageModel {
 public:
  virtual ~CachedLanguageModel() = default;
  virtual std::int64_t block_size() const = 0;
  // Logits [B, T, vocab] of `tokens` [B, T] at positions cache.length ..; appends their keys
  // and values. cache.length + T must not exceed block_size().
  virtual at::Tensor forward_cached(const at::Tensor& tokens, KvCache& cache) = 0;
};

// Which tokens of a batch are real, for rows of different lengths padded to one length.
struct TokenMask {
  at::Tensor keys;       // [B, S] bool, S = cached + new tokens: false marks padding, which no token attends to
  at::Tensor positions;  // [B, T] int64: the new tokens' positions, from which their rotary angles are
};

// A language model that takes such a mask (llama): how `hpctrain forward` honours an
// attention_mask and generation batches prompts of different lengths, padded on the left.
class MaskedLanguageModel {
 public:
  virtual ~MaskedLanguageModel() = default;
  // Logits [B, T, vocab] of `tokens` [B, T] under `mask`; with a cache, the new tokens attend to
  // the cached ones too and their keys and values are appended. A padded token's logits are
  // computed but mean nothing.
  virtual at::Tensor forward_masked(const at::Tensor& tokens, const TokenMask& mask, KvCache* cache) = 0;
};

}  // namespace hpctrain::model
