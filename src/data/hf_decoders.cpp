// tokenizer.json's decoders (ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace,
// Sequence) and its post-processor's template (TemplateProcessing, ByteLevel, Sequence).
#include <nlohmann/json.hpp>

#include "hf_regex.h"
#include "hf_tokenizer_parts.h"
#include "hpctrain/core/error.h"
#include "utf8.h"

namespace hpctrain::data::hf {
namespace {

using nlohmann::json;

// Every token's characters as the bytes of GPT-2's alphabet they stand for, joined; a token with
// a character outside the alphabet (an added token's) as its own UTF-8.
class ByteLevel final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      std::string mapped;
      bool in_alphabet = true;
      for (size_t i = 0; i < token.size() && in_alphabet;) {
        const int byte = byte_of_char(next_code_point(token, i));
        in_alphabet = byte >= 0;
        mapped += static_cast<char>(byte);
      }
      bytes += in_alphabet ? mapped : token;
    }
    tokens = {bytes};
  }
};

// Runs of <0xHH> tokens as their bytes: the text they spell, or one U+FFFD per byte when that
// is not UTF-8.
class ByteFallback final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    const auto flush = [&] {
      if (bytes.empty()) return;
      if (valid_utf8(bytes) == bytes) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < bytes.size(); ++i) out.emplace_back("\uFFFD");
      }
      bytes.clear();
    };
    for (const std::string& token : tokens) {
      unsigned value = 0;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
          std::sscanf(token.c_str() + 3, "%2x", &value) == 1) {
        bytes += static_cast<char>(value);
        continue;
      }
      flush();
      out.push_back(token);
    }
    flush();
    tokens = std::move(out);
  }
};

class Fuse final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    tokens = {joined};
  }
};

// Up to `start` leading and `stop` trailing copies of `content` off each token.
class Strip final : public Decoder {
 public:
  Strip(std::string content, std::int64_t start, std::int64_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens) const override {
    if (content_.empty()) return;
    for (std::string& token : tokens) {
      for (std::int64_t k = 0; k < start_ && token.compare(0, content_.size(), content_) == 0; ++k) {
        token.erase(0, content_.size());
      }
      for (std::int64_t k = 0; k < stop_ && token.size() >= content_.size() &&
                               token.compare(token.size() - content_.size(), content_.size(), content_) == 0;
           ++k) {
        token.erase(token.size() - content_.size());
      }
    }
  }

 private:
  std::string content_;
  std::int64_t start_;
  std::int64_t stop_;
};

class Replace final : public Decoder {
 public:
  Replace(const json& spec, const std::string& where)
      : pattern_(spec.value("pattern", json()), where + ".pattern"), content_(spec.value("content", std::string())) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) token = pattern_.replace_all(token, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// The replacement character back to spaces; the first token's leading one dropped unless the
// pre-tokenizer never put it there.
class Metaspace final : public Decoder {
 public:
  Metaspace(std::string replacement, bool prepended) : replacement_(std::move(replacement)), prepended_(prepended) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      for (size_t at = 0; at < tokens[i].size();) {
        if (!replacement_.empty() && tokens[i].compare(at, replacement_.size(), replacement_) == 0) {
          out += ' ';
          at += replacement_.size();
        } else {
          out += tokens[i][at++];
        }
      }
      if (i == 0 && prepended_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool prepended_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (const auto& part : parts_) part->decode(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

// A template's special token: its ids from the post-processor's special_tokens.
std::vector<std::int32_t> special_ids(const json& specials, const std::string& name, const std::string& where) {
  const json& entry = specials.is_object() ? specials.value(name, json()) : json();
  const json& ids = entry.is_object() ? entry.value("ids", json()) : json();
  if (!ids.is_array()) throw DataError(where + ".special_tokens: '" + name + "' is not there with its ids");
  std::vector<std::int32_t> out;
  for (const json& id : ids) {
    if (!id.is_number_unsigned() || id.get<std::uint64_t>() > static_cast<std::uint64_t>(INT32_MAX)) {
      throw DataError(where + ".special_tokens: '" + name + "' has id " + id.dump());
    }
    out.push_back(id.get<std::int32_t>());
  }
  return out;
}

Template template_processing(const json& spec, const std::string& where) {
  const json& single = spec.value("single", json());
  if (!single.is_array()) throw DataError(where + ".single: not a list");
  Template out;
  bool seen_sequence = false;
  for (const json& piece : single) {
    if (piece.is_object() && piece.contains("Sequence")) {
      if (seen_sequence) throw DataError(where + ".single: names the sequence twice");
      seen_sequence = true;
    } else if (piece.is_object() && piece.contains("SpecialToken") && piece["SpecialToken"].is_object() &&
               piece["SpecialToken"].value("id", json()).is_string()) {
      const std::vector<std::int32_t> ids =
          special_ids(spec.value("special_tokens", json()), piece["SpecialToken"]["id"].get<std::string>(), where);
      std::vector<std::int32_t>& side = seen_sequence ? out.after : out.before;
      side.insert(side.end(), ids.begin(), ids.end());
    } else {
      throw DataError(where + ".single: " + piece.dump() + " is neither a Sequence nor a SpecialToken");
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.is_object() ? spec.value("type", std::string()) : std::string();
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") {
    return std::make_unique<Strip>(spec.value("content", std::string(" ")), spec.value("start", std::int64_t{0}),
                                   spec.value("stop", std::int64_t{0}));
  }
  if (type == "Replace") return std::make_unique<Replace>(spec, where);
  if (type == "Metaspace") {
    const std::string scheme = spec.value("prepend_scheme", spec.value("add_prefix_space", true) ? "always" : "never");
    return std::make_unique<Metaspace>(spec.value("replacement", std::string("\u2581")), scheme != "never");
  }
  if (type == "Sequence") {
    return std::make_unique<Sequence>(sequence_parts<Decoder>(spec, "decoders", where, make_decoder));
  }
  throw DataError(where + ": type '" + type +
                  "' is not supported (supported: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence)");
}

Template make_template(const json& spec, const std::string& where) {
  if (spec.is_null()) return {};
  const std::string type = spec.is_object() ? spec.value("type", std::string()) : std::string();
  if (type == "TemplateProcessing") return template_processing(spec, where);
  if (type == "ByteLevel") return {};  // it changes offsets only
  if (type == "Sequence") {
    const json& list = spec.value("processors", json());
    if (!list.is_array()) throw DataError(where + ".processors: not a list");
    Template out;
    for (size_t i = 0; i < list.size(); ++i) {
      const Template part = make_template(list[i], where + ".processors[" + std::to_string(i) + "]");
      // Each processor wraps what the ones before it made.
      out.before.insert(out.before.begin(), part.before.begin(), part.before.end());
      out.after.insert(out.after.end(), part.after.begin(), part.after.end());
    }
    return out;
  }
  throw DataError(where + ": type '" + type +
                  "' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
}

}  // namespace hpctrain::data::hf
