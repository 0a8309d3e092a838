// GPT-2's byte-level BPE tokenizer, from the two files OpenAI published with GPT-2: encoder.json
// (token -> id) and vocab.bpe (the merges, in priority order). Text is split into pre-tokens as
// GPT-2's pattern splits it ('s 't 're 've 'm 'll 'd, letters, numbers, other symbols, each with
// one leading space, and runs of whitespace), with JavaScript's Unicode classes (the reference is
// the npm package gpt-3-encoder); each pre-token's UTF-8 bytes are merged by BPE into tokens.
// Text that is not valid UTF-8 is read with U+FFFD for each bad sequence. Depends on core.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hpctrain/data/tokenizer.h"

namespace hpctrain::data {

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // Reads and checks both files: sizes before reading, every token made of GPT-2's byte alphabet,
  // every byte a token, ids unique and below 65,536 (token streams store uint16). Throws
  // DataError naming the file (and the line of vocab.bpe).
  static Gpt2Tokenizer load(const std::string& encoder_json, const std::string& merges);

  std::vector<std::int32_t> encode(std::string_view utf8) const override;
  // The bytes the tokens stand for; an id outside the vocabulary is a DataError.
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  // The largest id + 1.
  std::int64_t vocabulary_size() const override { return static_cast<std::int64_t>(bytes_of_id_.size()); }

 private:
  Gpt2Tokenizer() = default;
  void encode_pretoken(const std::string& bytes, std::vector<std::int32_t>& out) const;

  std::unordered_map<std::string, std::int32_t> id_of_bytes_;  // a token's bytes -> its id
  std::vector<std::string> bytes_of_id_;
  std::unordered_map<std::string, std::int32_t> merge_rank_;  // pair_key(a, b) -> priority
};

// GPT-2's pre-tokens of `utf8`, each as UTF-8 (bad sequences become U+FFFD); the tokenizer's first
// step, apart for its tests.
std::vector<std::string> gpt2_pretokens(std::string_view utf8);

}  // namespace hpctrain::data
