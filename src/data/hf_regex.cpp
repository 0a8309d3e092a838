#include "hf_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "hpctrain/core/error.h"

namespace hpctrain::data::hf {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  std::string where;
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, const std::string& where) : compiled_(std::make_unique<Compiled>()) {
  compiled_->where = where;
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw DataError(where + ": the pattern '" + pattern + "' does not compile at offset " + std::to_string(offset) +
                    ": " + reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);  // without JIT, matching is only slower
}

Regex::~Regex() = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  while (at <= text.size()) {
    const int found = pcre2_match(compiled_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (found == PCRE2_ERROR_NOMATCH) break;
    if (found < 0) {  // a resource limit: a pattern that backtracks without end on this text
      pcre2_match_data_free(data);
      throw DataError(compiled_->where + ": the pattern gave up on a text of " + std::to_string(text.size()) +
                      " bytes (PCRE2 error " + std::to_string(found) + ", its match limit)");
    }
    const PCRE2_SIZE* range = pcre2_get_ovector_pointer(data);
    const size_t begin = range[0];
    const size_t end = range[1];
    out.emplace_back(begin, end);  // an empty one too: it splits what is around it, as in tokenizers
    if (end > begin) {
      at = end;
      continue;
    }
    // An empty match: on to the next character.
    at = begin + 1;
    while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
  }
  pcre2_match_data_free(data);
  return out;
}

Pattern::Pattern(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_object() && spec.contains("String") && spec["String"].is_string()) {
    literal_ = spec["String"].get<std::string>();
    if (literal_.empty()) throw DataError(where + ": an empty string");
  } else if (spec.is_object() && spec.contains("Regex") && spec["Regex"].is_string()) {
    regex_ = std::make_unique<Regex>(spec["Regex"].get<std::string>(), where);
  } else {
    throw DataError(where + ": not {\"String\": ...} or {\"Regex\": ...}");
  }
}

std::vector<std::pair<size_t, size_t>> Pattern::find_all(std::string_view text) const {
  if (regex_) return regex_->find_all(text);
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t at = text.find(literal_); at != std::string_view::npos; at = text.find(literal_, at + literal_.size())) {
    out.emplace_back(at, at + literal_.size());
  }
  return out;
}

std::string Pattern::replace_all(std::string_view text, const std::string& content) const {
  std::string out;
  size_t at = 0;
  for (const auto& [begin, end] : find_all(text)) {
    out.append(text.substr(at, begin - at));
    out += content;
    at = end;
  }
  out.append(text.substr(at));
  return out;
}

}  // namespace hpctrain::data::hf
