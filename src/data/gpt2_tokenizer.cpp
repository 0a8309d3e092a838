#include "hpctrain/data/gpt2_tokenizer.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "utf8.h"

namespace hpctrain::data {
namespace {

// Tokenizer files are a few MB (GPT-2's: 1.0 and 0.5 MB); anything far larger is not one.
constexpr std::int64_t kMaxFileBytes = 256 << 20;
constexpr std::int64_t kMaxVocabulary = 65536;  // uint16 token ids

struct CodePointRange {
  char32_t first;
  char32_t last;
};
#include "unicode_classes.inc"

template <size_t N>
bool in(const CodePointRange (&ranges)[N], char32_t c) {
  // The first range that starts after c; the one before it is the only one that may hold c.
  const auto* after = std::upper_bound(ranges, ranges + N, c,
                                       [](char32_t value, const CodePointRange& r) { return value < r.first; });
  return after != ranges && c <= (after - 1)->last;
}

enum class Kind { kLetter, kNumber, kSpace, kOther };

// JavaScript's classes, as the reference's /u pattern uses them: \p{L}, \p{N}, and \s (TAB, LF,
// VT, FF, CR, U+FEFF, the line and paragraph separators, and every space separator Zs).
Kind kind_of(char32_t c) {
  if (in(kLetters, c)) return Kind::kLetter;
  if (in(kNumbers, c)) return Kind::kNumber;
  if ((c >= 0x09 && c <= 0x0D) || c == 0xFEFF || c == 0x2028 || c == 0x2029 || in(kSpaceSeparators, c)) {
    return Kind::kSpace;
  }
  return Kind::kOther;
}

// The length of the pre-token at `i` of `text`, by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// tried alternative by alternative, as a backtracking regex engine does.
size_t pretoken_length(const std::u32string& text, size_t i) {
  const size_t n = text.size();
  for (const std::u32string_view suffix : {U"s", U"t", U"re", U"ve", U"m", U"ll", U"d"}) {
    if (text[i] == U'\'' && text.compare(i + 1, suffix.size(), suffix) == 0) return 1 + suffix.size();
  }
  const auto run = [&](size_t from, Kind kind) {
    size_t j = from;
    while (j < n && kind_of(text[j]) == kind) ++j;
    return j - from;
  };
  const size_t space = text[i] == U' ' && i + 1 < n ? 1 : 0;
  for (const Kind kind : {Kind::kLetter, Kind::kNumber, Kind::kOther}) {
    if (const size_t body = run(i + space, kind); body > 0) return space + body;
  }
  const size_t spaces = run(i, Kind::kSpace);  // >= 1: every other kind matched above
  if (i + spaces == n || spaces == 1) return spaces;  // \s+ at the end, or \s+ for a lone space
  return spaces - 1;  // \s+(?!\S): the last space goes with the next pre-token
}

// A token as written in the files (characters of GPT-2's alphabet, UTF-8) to the bytes it stands
// for; false when a character is outside the alphabet.
bool token_bytes(std::string_view written, std::string& bytes) {
  bytes.clear();
  for (size_t i = 0; i < written.size();) {
    const int byte = byte_of_char(next_code_point(written, i));
    if (byte < 0) return false;
    bytes += static_cast<char>(byte);
  }
  return !bytes.empty();
}

std::string pair_key(const std::string& a, const std::string& b) { return std::to_string(a.size()) + ':' + a + b; }

}  // namespace

std::vector<std::string> gpt2_pretokens(std::string_view utf8) {
  std::u32string text;
  for (size_t i = 0; i < utf8.size();) text += next_code_point(utf8, i);
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const size_t length = pretoken_length(text, i);
    std::string piece;
    for (size_t k = i; k < i + length; ++k) append_utf8(text[k], piece);
    out.push_back(std::move(piece));
    i += length;
  }
  return out;
}

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& encoder_json, const std::string& merges) {
  Gpt2Tokenizer t;
  const nlohmann::json encoder = nlohmann::json::parse(
      sys::read_small_file<DataError>(encoder_json, kMaxFileBytes, "a tokenizer file"), nullptr, false);
  if (!encoder.is_object() || encoder.empty()) {
    throw DataError(encoder_json + ": not GPT-2's encoder.json (a JSON object of token -> id)");
  }
  std::string bytes;
  for (const auto& [written, id] : encoder.items()) {
    if (!id.is_number_unsigned() || id.get<std::uint64_t>() >= kMaxVocabulary) {
      throw DataError(encoder_json + ": token '" + written + "' has id " + id.dump() + "; ids run from 0 to " +
                      std::to_string(kMaxVocabulary - 1));
    }
    if (!token_bytes(written, bytes)) {
      throw DataError(encoder_json + ": token '" + written + "' is not written in GPT-2's byte alphabet");
    }
    const auto value = static_cast<std::int32_t>(id.get<std::uint64_t>());
    if (t.bytes_of_id_.size() <= static_cast<size_t>(value)) t.bytes_of_id_.resize(static_cast<size_t>(value) + 1);
    if (!t.bytes_of_id_[static_cast<size_t>(value)].empty() || !t.id_of_bytes_.emplace(bytes, value).second) {
      throw DataError(encoder_json + ": id " + std::to_string(value) + " or token '" + written + "' is given twice");
    }
    t.bytes_of_id_[static_cast<size_t>(value)] = bytes;
  }
  for (int b = 0; b < 256; ++b) {
    if (t.id_of_bytes_.count(std::string(1, static_cast<char>(b))) == 0) {
      throw DataError(encoder_json + ": byte " + std::to_string(b) + " has no token of its own");
    }
  }
  const std::string text = sys::read_small_file<DataError>(merges, kMaxFileBytes, "a tokenizer file");
  size_t line_number = 0;
  std::int32_t rank = 0;
  std::string a;
  std::string b;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_number;
    if (line.empty() || (line_number == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos ||
        !token_bytes(line.substr(0, space), a) || !token_bytes(line.substr(space + 1), b)) {
      throw DataError(merges + ":" + std::to_string(line_number) +
                      ": not a merge (two tokens of GPT-2's byte alphabet, one space between)");
    }
    t.merge_rank_.emplace(pair_key(a, b), rank++);
  }
  return t;
}

void Gpt2Tokenizer::encode_pretoken(const std::string& bytes, std::vector<std::int32_t>& out) const {
  std::vector<std::string> word;
  for (const char c : bytes) word.emplace_back(1, c);
  while (word.size() > 1) {
    // The adjacent pair merged first; then every occurrence of it, left to right.
    std::int32_t best = std::numeric_limits<std::int32_t>::max();
    size_t at = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto found = merge_rank_.find(pair_key(word[i], word[i + 1]));
      if (found != merge_rank_.end() && found->second < best) {
        best = found->second;
        at = i;
      }
    }
    if (best == std::numeric_limits<std::int32_t>::max()) break;
    const std::string first = word[at];
    const std::string second = word[at + 1];
    std::vector<std::string> merged;
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        ++i;
      } else {
        merged.push_back(word[i]);
      }
    }
    word = std::move(merged);
  }
  for (const std::string& token : word) {
    const auto found = id_of_bytes_.find(token);
    if (found == id_of_bytes_.end()) {
      throw DataError("the merges make a token that encoder.json lacks (" + std::to_string(token.size()) +
                      " bytes); the two tokenizer files are not a pair");
    }
    out.push_back(found->second);
  }
}

std::vector<std::int32_t> Gpt2Tokenizer::encode(std::string_view utf8) const {
  constexpr size_t kCachedPieces = 1 << 20;  // words repeat: BPE each distinct one once
  std::unordered_map<std::string, std::vector<std::int32_t>> cache;
  std::vector<std::int32_t> out;
  for (const std::string& piece : gpt2_pretokens(utf8)) {
    if (const auto found = cache.find(piece); found != cache.end()) {
      out.insert(out.end(), found->second.begin(), found->second.end());
      continue;
    }
    std::vector<std::int32_t> ids;
    encode_pretoken(piece, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cache.size() < kCachedPieces) cache.emplace(piece, std::move(ids));
  }
  return out;
}

std::string Gpt2Tokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  for (const std::int32_t id : ids) {
    if (id < 0 || id >= vocabulary_size() || bytes_of_id_[static_cast<size_t>(id)].empty()) {
      throw DataError("token id " + std::to_string(id) + " is not in the tokenizer's vocabulary");
    }
    out += bytes_of_id_[static_cast<size_t>(id)];
  }
  return out;
}

}  // namespace hpctrain::data
