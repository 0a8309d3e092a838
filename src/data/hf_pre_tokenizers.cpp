// tokenizer.json's pre-tokenizers: Split (a pattern and one of its five behaviours), ByteLevel,
// Metaspace, Digits, Whitespace, WhitespaceSplit and Sequence.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "hf_regex.h"
#include "hf_tokenizer_parts.h"
#include "hpctrain/core/error.h"
#include "utf8.h"

namespace hpctrain::data::hf {
namespace {

using nlohmann::json;

enum class Behaviour { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Segment {
  size_t begin;
  size_t end;
  bool matched;
};

// The text cut at the matches: every byte in one segment, in order (tokenizers' find_matches).
std::vector<Segment> segments(const std::string& text, const std::vector<std::pair<size_t, size_t>>& matches,
                              bool invert) {
  std::vector<Segment> out;
  size_t at = 0;
  for (const auto& [begin, end] : matches) {
    if (begin != at) out.push_back({at, begin, invert});
    out.push_back({begin, end, !invert});
    at = end;
  }
  if (at != text.size() || out.empty()) out.push_back({at, text.size(), invert});
  return out;
}

// The pieces of one text, joined or dropped as the behaviour says (tokenizers' NormalizedString::split).
void cut(const std::string& text, std::vector<Segment> parts, Behaviour behaviour, std::vector<std::string>& out) {
  std::vector<Segment> kept;  // `matched` now means "remove"
  bool previous = false;
  switch (behaviour) {
    case Behaviour::kRemoved:
      kept = std::move(parts);
      break;
    case Behaviour::kIsolated:
      for (Segment s : parts) kept.push_back({s.begin, s.end, false});
      break;
    case Behaviour::kContiguous:
      for (const Segment& s : parts) {
        if (s.matched == previous && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.begin, s.end, false});
        }
        previous = s.matched;
      }
      break;
    case Behaviour::kMergedWithPrevious:
      for (const Segment& s : parts) {
        if (s.matched && !previous && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.begin, s.end, false});
        }
        previous = s.matched;
      }
      break;
    case Behaviour::kMergedWithNext:
      for (auto s = parts.rbegin(); s != parts.rend(); ++s) {
        if (s->matched && !previous && !kept.empty()) {
          kept.back().begin = s->begin;
        } else {
          kept.push_back({s->begin, s->end, false});
        }
        previous = s->matched;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Segment& s : kept) {
    if (!s.matched && s.end > s.begin) out.push_back(text.substr(s.begin, s.end - s.begin));
  }
}

Behaviour behaviour_of(const json& spec, const std::string& where) {
  const std::string name = spec.value("behavior", std::string());
  if (name == "Removed") return Behaviour::kRemoved;
  if (name == "Isolated") return Behaviour::kIsolated;
  if (name == "MergedWithPrevious") return Behaviour::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behaviour::kMergedWithNext;
  if (name == "Contiguous") return Behaviour::kContiguous;
  throw DataError(where + ".behavior '" + name +
                  "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

class Split final : public PreTokenizer {
 public:
  Split(const json& pattern, const std::string& where, Behaviour behaviour, bool invert)
      : pattern_(pattern, where), behaviour_(behaviour), invert_(invert) {}
  void split(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    for (const std::string& piece : pieces) {
      cut(piece, segments(piece, pattern_.find_all(piece), invert_), behaviour_, out);
    }
    pieces = std::move(out);
  }

 private:
  Pattern pattern_;
  Behaviour behaviour_;
  bool invert_;
};

// GPT-2's pattern, which ByteLevel's use_regex splits by.
const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Each piece's bytes as characters of GPT-2's byte alphabet (utf8.h), split first by GPT-2's
// pattern with use_regex.
class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) {
      split_ = std::make_unique<Split>(json{{"Regex", kGpt2Pattern}}, "ByteLevel", Behaviour::kIsolated, false);
    }
  }
  void split(std::vector<std::string>& pieces) const override {
    if (add_prefix_space_) {
      for (std::string& piece : pieces) {
        if (piece.empty() || piece[0] != ' ') piece.insert(0, " ");
      }
    }
    if (split_) split_->split(pieces);
    for (std::string& piece : pieces) {
      std::string mapped;
      for (const char c : piece) append_utf8(byte_to_char()[static_cast<std::uint8_t>(c)], mapped);
      piece = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Split> split_;
};

// Spaces as the replacement character (U+2581 by default), one put in front as the scheme says,
// and each piece cut before every replacement character with `split`.
class Metaspace final : public PreTokenizer {
 public:
  Metaspace(std::string replacement, bool prepend, bool split)
      : replacement_(std::move(replacement)),
        prepend_(prepend),
        split_(split),
        at_replacement_(json{{"String", replacement_}}, "Metaspace.replacement") {}
  void split(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    for (std::string& piece : pieces) {
      std::string replaced;
      for (const char c : piece) {
        if (c == ' ') {
          replaced += replacement_;
        } else {
          replaced += c;
        }
      }
      if (prepend_ && replaced.compare(0, replacement_.size(), replacement_) != 0) replaced.insert(0, replacement_);
      if (!split_) {
        out.push_back(std::move(replaced));
        continue;
      }
      cut(replaced, segments(replaced, at_replacement_.find_all(replaced), false), Behaviour::kMergedWithNext, out);
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  bool prepend_;
  bool split_;
  Pattern at_replacement_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(std::vector<std::string>& pieces) const override {
    for (const auto& part : parts_) part->split(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

std::unique_ptr<PreTokenizer> make_metaspace(const json& spec, const std::string& where) {
  const std::string scheme = spec.value("prepend_scheme", spec.value("add_prefix_space", true) ? "always" : "never");
  if (scheme != "always" && scheme != "never") {
    throw DataError(where + ".prepend_scheme '" + scheme + "' is not supported (always, never)");
  }
  return std::make_unique<Metaspace>(spec.value("replacement", std::string("\u2581")), scheme == "always",
                                     spec.value("split", true));
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.is_object() ? spec.value("type", std::string()) : std::string();
  if (type == "Split") {
    return std::make_unique<Split>(spec.value("pattern", json()), where + ".pattern", behaviour_of(spec, where),
                                   spec.value("invert", false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevel>(spec.value("add_prefix_space", true), spec.value("use_regex", true));
  }
  if (type == "Metaspace") return make_metaspace(spec, where);
  if (type == "Digits") {
    const char* pattern = spec.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)";
    return std::make_unique<Split>(json{{"Regex", pattern}}, where, Behaviour::kIsolated, false);
  }
  if (type == "Whitespace") {
    return std::make_unique<Split>(json{{"Regex", R"(\w+|[^\w\s]+)"}}, where, Behaviour::kRemoved, true);
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<Split>(json{{"Regex", R"(\s+)"}}, where, Behaviour::kRemoved, false);
  }
  if (type == "Sequence") {
    return std::make_unique<Sequence>(sequence_parts<PreTokenizer>(spec, "pretokenizers", where, make_pre_tokenizer));
  }
  throw DataError(where + ": type '" + type +
                  "' is not supported (supported: Split, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit, "
                  "Sequence)");
}

}  // namespace hpctrain::data::hf
