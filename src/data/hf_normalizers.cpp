// tokenizer.json's normalizers: Unicode normal forms (utf8proc), Lowercase, Prepend, Replace,
// Strip and Sequence.
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "hf_regex.h"
#include "hf_tokenizer_parts.h"
#include "hpctrain/core/error.h"
#include "utf8.h"

namespace hpctrain::data::hf {
namespace {

using nlohmann::json;

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  void normalize(std::string& text) const override {
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t length =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                     &mapped, static_cast<utf8proc_option_t>(options_));
    if (length < 0) return;  // not reached for valid UTF-8; the text is left as it is
    text.assign(reinterpret_cast<const char*>(mapped), static_cast<size_t>(length));
    std::free(mapped);
  }

 private:
  int options_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    for (size_t i = 0; i < text.size();) {
      append_utf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(next_code_point(text, i)))),
                  out);
    }
    text = std::move(out);
  }
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Replace final : public Normalizer {
 public:
  Replace(const json& spec, const std::string& where)
      : pattern_(spec.value("pattern", json()), where + ".pattern"), content_(spec.value("content", std::string())) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t first = text.size();  // of the first character that is not whitespace
    size_t last = 0;             // past the last one
    for (size_t i = 0; i < text.size();) {
      const size_t at = i;
      if (is_whitespace(next_code_point(text, i))) continue;
      first = std::min(first, at);
      last = i;
    }
    if (first == text.size()) {  // whitespace alone
      if (left_ || right_) text.clear();
      return;
    }
    const size_t begin = left_ ? first : 0;
    const size_t end = right_ ? last : text.size();
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_;
  bool right_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& part : parts_) part->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.is_object() ? spec.value("type", std::string()) : std::string();
  if (type == "NFC") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Prepend") return std::make_unique<Prepend>(spec.value("prepend", std::string()));
  if (type == "Replace") return std::make_unique<Replace>(spec, where);
  if (type == "Strip") return std::make_unique<Strip>(spec.value("strip_left", true), spec.value("strip_right", true));
  if (type == "Sequence") {
    return std::make_unique<Sequence>(sequence_parts<Normalizer>(spec, "normalizers", where, make_normalizer));
  }
  throw DataError(where + ": type '" + type +
                  "' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip, Sequence)");
}

}  // namespace hpctrain::data::hf
