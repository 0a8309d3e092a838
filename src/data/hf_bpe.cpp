// tokenizer.json's BPE model: each pre-token's characters to ids, merged lowest rank first.
#include <limits>
#include <nlohmann/json.hpp>

#include "hf_tokenizer_parts.h"
#include "hpctrain/core/error.h"
#include "utf8.h"

namespace hpctrain::data::hf {
namespace {

using nlohmann::json;

constexpr std::int64_t kMaxVocabulary = std::numeric_limits<std::int32_t>::max();

std::uint64_t pair_of(std::int32_t a, std::int32_t b) {
  return static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32 | static_cast<std::uint32_t>(b);
}

// A value that must be null (or absent, or the default) for this reader.
void refuse_set(const json& spec, const char* key, const std::string& where, const char* what) {
  const auto found = spec.find(key);
  if (found == spec.end() || found->is_null() || (found->is_string() && found->get<std::string>().empty())) return;
  throw DataError(where + "." + key + " is " + found->dump() + ": " + what + " is not supported");
}

}  // namespace

Bpe::Bpe(const json& spec, const std::string& where) {
  refuse_set(spec, "dropout", where, "BPE dropout");
  refuse_set(spec, "continuing_subword_prefix", where, "a continuing-subword prefix");
  refuse_set(spec, "end_of_word_suffix", where, "an end-of-word suffix");
  const json& vocab = spec.value("vocab", json());
  if (!vocab.is_object() || vocab.empty()) throw DataError(where + ".vocab: not an object of token -> id");
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_unsigned() || id.get<std::uint64_t>() >= static_cast<std::uint64_t>(kMaxVocabulary)) {
      throw DataError(where + ".vocab: token '" + token + "' has id " + id.dump() + ", not an id from 0 up");
    }
    const auto value = id.get<std::int32_t>();
    if (static_cast<std::int64_t>(value) >= static_cast<std::int64_t>(vocab.size()) * 2 + 1024) {
      throw DataError(where + ".vocab: id " + std::to_string(value) + " is far past the vocabulary's " +
                      std::to_string(vocab.size()) + " tokens");
    }
    if (tokens_.size() <= static_cast<size_t>(value)) tokens_.resize(static_cast<size_t>(value) + 1);
    if (!tokens_[static_cast<size_t>(value)].empty() || !ids_.emplace(token, value).second) {
      throw DataError(where + ".vocab: id " + std::to_string(value) + " or token '" + token + "' is given twice");
    }
    tokens_[static_cast<size_t>(value)] = token;
  }
  const json& merges = spec.value("merges", json::array());
  if (!merges.is_array()) throw DataError(where + ".merges: not a list");
  std::int32_t rank = 0;
  for (const json& merge : merges) {
    const std::string at = where + ".merges[" + std::to_string(rank) + "]";
    if (merge.is_string()) {  // "a b"
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        throw DataError(at + ": '" + text + "' is not two tokens with one space between");
      }
      add_merge(text.substr(0, space), text.substr(space + 1), rank++, at);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      add_merge(merge[0].get<std::string>(), merge[1].get<std::string>(), rank++, at);
    } else {
      throw DataError(at + ": not \"a b\" nor [\"a\", \"b\"]");
    }
  }
  if (const json& unk = spec.value("unk_token", json()); unk.is_string()) {
    unk_ = id_of(unk.get<std::string>());
    if (!unk_) throw DataError(where + ".unk_token '" + unk.get<std::string>() + "' is not in the vocabulary");
  }
  byte_fallback_ = spec.value("byte_fallback", false);
  ignore_merges_ = spec.value("ignore_merges", false);
  fuse_unk_ = spec.value("fuse_unk", false);
}

void Bpe::add_merge(const std::string& a, const std::string& b, std::int32_t rank, const std::string& where) {
  const std::optional<std::int32_t> left = id_of(a);
  const std::optional<std::int32_t> right = id_of(b);
  const std::optional<std::int32_t> merged = id_of(a + b);
  if (!left || !right || !merged) {
    const std::string missing = !left ? a : !right ? b : a + b;
    throw DataError(where + ": merges '" + a + "' and '" + b + "', but '" + missing + "' is not in the vocabulary");
  }
  merges_.emplace(pair_of(*left, *right), std::make_pair(rank, *merged));  // the first of a pair given twice wins
}

std::optional<std::int32_t> Bpe::id_of(std::string_view token) const {
  const auto found = ids_.find(std::string(token));
  if (found == ids_.end()) return std::nullopt;
  return found->second;
}

const std::string& Bpe::token_of(std::int32_t id) const {
  static const std::string none;
  return id >= 0 && static_cast<size_t>(id) < tokens_.size() ? tokens_[static_cast<size_t>(id)] : none;
}

// The piece's characters as ids: a character outside the vocabulary becomes its bytes'
// <0xHH> tokens (byte_fallback), else the unknown token (runs of it fused with fuse_unk), else
// nothing, as Hugging Face's BPE does.
void Bpe::symbols_of(const std::string& piece, std::vector<std::int32_t>& out) const {
  for (size_t i = 0; i < piece.size();) {
    const size_t start = i;
    next_code_point(piece, i);
    const std::string character = piece.substr(start, i - start);
    if (const std::optional<std::int32_t> id = id_of(character)) {
      out.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      std::vector<std::int32_t> bytes;
      for (const char c : character) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned>(static_cast<std::uint8_t>(c)));
        if (const std::optional<std::int32_t> id = id_of(name)) bytes.push_back(*id);
      }
      if (bytes.size() == character.size()) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (!unk_) continue;
    const bool fused = fuse_unk_ && !out.empty() && out.back() == *unk_;
    if (!fused) out.push_back(*unk_);
  }
}

void Bpe::encode(const std::string& piece, std::vector<std::int32_t>& out) const {
  if (ignore_merges_) {
    if (const std::optional<std::int32_t> whole = id_of(piece)) {
      out.push_back(*whole);
      return;
    }
  }
  std::vector<std::int32_t> word;
  symbols_of(piece, word);
  while (word.size() > 1) {
    // The lowest-ranked adjacent pair, then every occurrence of it left to right: the order in
    // which a priority queue of (rank, position) merges them.
    std::int32_t best = std::numeric_limits<std::int32_t>::max();
    std::uint64_t best_pair = 0;
    std::int32_t merged = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto found = merges_.find(pair_of(word[i], word[i + 1]));
      if (found != merges_.end() && found->second.first < best) {
        best = found->second.first;
        best_pair = found->first;
        merged = found->second.second;
      }
    }
    if (best == std::numeric_limits<std::int32_t>::max()) break;
    size_t kept = 0;
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && pair_of(word[i], word[i + 1]) == best_pair) {
        word[kept++] = merged;
        ++i;
      } else {
        word[kept++] = word[i];
      }
    }
    word.resize(kept);
  }
  out.insert(out.end(), word.begin(), word.end());
}

}  // namespace hpctrain::data::hf
