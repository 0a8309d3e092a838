// The pipeline stages of a Hugging Face tokenizer.json, each read from its JSON object: the
// normalizer, the pre-tokenizer, the BPE model, the post-processor and the decoder. A type the
// readers do not know is a DataError naming it and the ones they do. Internal to data.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hpctrain/core/error.h"

namespace hpctrain::data::hf {

// Rewrites a piece of text (valid UTF-8) before it is split.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// Splits each piece into smaller ones (and may rewrite them, as ByteLevel does).
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void split(std::vector<std::string>& pieces) const = 0;
};

// Turns the token strings of the ids back into text pieces, as the decoder chain does.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode(std::vector<std::string>& tokens) const = 0;
};

// The ids a post-processor puts around an encoded text (TemplateProcessing's single template).
struct Template {
  std::vector<std::int32_t> before;
  std::vector<std::int32_t> after;
};

// A Sequence's parts: each element of `spec[key]` made by `make(element, where)`, nulls left out.
template <class Part, class Make>
std::vector<std::unique_ptr<Part>> sequence_parts(const nlohmann::json& spec, const std::string& key,
                                                  const std::string& where, Make make) {
  const nlohmann::json& list = spec.value(key, nlohmann::json());
  if (!list.is_array()) throw DataError(where + "." + key + ": not a list");
  std::vector<std::unique_ptr<Part>> parts;
  for (size_t i = 0; i < list.size(); ++i) {
    if (auto part = make(list[i], where + "." + key + "[" + std::to_string(i) + "]")) parts.push_back(std::move(part));
  }
  return parts;
}

// Null JSON: none. `where` names the key in messages ("tokenizer.json: normalizer").
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& where);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& where);
Template make_template(const nlohmann::json& spec, const std::string& where);

// The BPE model: vocab, merges by rank, and what a character outside the vocabulary becomes.
class Bpe {
 public:
  Bpe(const nlohmann::json& spec, const std::string& where);
  // The ids of one pre-token (its characters merged by rank); appended to `out`.
  void encode(const std::string& piece, std::vector<std::int32_t>& out) const;
  std::optional<std::int32_t> id_of(std::string_view token) const;
  // "" for an id the vocabulary lacks.
  const std::string& token_of(std::int32_t id) const;
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }

 private:
  struct PairHash {
    std::size_t operator()(std::uint64_t pair) const { return std::hash<std::uint64_t>()(pair); }
  };
  void add_merge(const std::string& a, const std::string& b, std::int32_t rank, const std::string& where);
  void symbols_of(const std::string& piece, std::vector<std::int32_t>& out) const;

  std::unordered_map<std::string, std::int32_t> ids_;
  std::vector<std::string> tokens_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>, PairHash> merges_;
  std::optional<std::int32_t> unk_;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
};

}  // namespace hpctrain::data::hf
