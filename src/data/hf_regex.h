// A Unicode-aware regular expression (PCRE2, UTF and UCP: \p{L}, \s and \w by Unicode's
// properties), as tokenizer.json's Split and Replace patterns are written. Internal to data.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hpctrain::data::hf {

class Regex {
 public:
  // Throws DataError naming `where` when `pattern` does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The [begin, end) byte ranges of the non-overlapping matches in `text` (valid UTF-8), left to
  // right, empty ones among them (the search then moves on by one character).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

// tokenizer.json's pattern of a Split or a Replace: {"String": literal} or {"Regex": pattern}.
class Pattern {
 public:
  // Throws DataError naming `where` for anything else.
  Pattern(const nlohmann::json& spec, const std::string& where);
  // As Regex::find_all; a literal's occurrences left to right.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  // `text` with every match replaced by `content`.
  std::string replace_all(std::string_view text, const std::string& content) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

}  // namespace hpctrain::data::hf
