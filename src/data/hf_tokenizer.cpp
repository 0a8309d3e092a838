#include "hpctrain/data/hf_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "hf_tokenizer_parts.h"
#include "json_depth.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "utf8.h"

namespace hpctrain::data {
namespace {

using nlohmann::json;

// Real tokenizer.json files are a few MB (Llama 3's 9, Qwen's 11); anything far larger is not one.
constexpr std::int64_t kMaxFileBytes = 256 << 20;
constexpr size_t kCachedWords = 1 << 20;  // words repeat: BPE each distinct one once per call

bool is_word_byte(unsigned char c) { return std::isalnum(c) != 0 || c == '_' || c >= 0x80; }
bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string resolved_path(const std::string& path) {
  return std::filesystem::is_directory(path) ? (std::filesystem::path(path) / "tokenizer.json").string() : path;
}

}  // namespace

HfTokenizer::HfTokenizer() = default;
HfTokenizer::~HfTokenizer() = default;

std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& given) {
  const std::string path = resolved_path(given);
  const json spec =
      json::parse(sys::read_small_file<DataError>(path, kMaxFileBytes, "a tokenizer.json"), nullptr, false);
  if (!spec.is_object()) throw DataError(path + ": not JSON, or not a tokenizer.json (a JSON object)");
  constexpr size_t kMaxDepth = 32;  // real files nest 6 deep
  if (nesting_depth(spec) > kMaxDepth) {
    throw DataError(path + ": nests deeper than " + std::to_string(kMaxDepth) + " levels; not a tokenizer.json");
  }
  const json& model = spec.value("model", json());
  const std::string type = model.is_object() ? model.value("type", std::string("BPE")) : std::string();
  if (type != "BPE") throw DataError(path + ": model type '" + type + "' is not supported (supported: BPE)");
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  t->normalizer_ = hf::make_normalizer(spec.value("normalizer", json()), path + ": normalizer");
  t->pre_tokenizer_ = hf::make_pre_tokenizer(spec.value("pre_tokenizer", json()), path + ": pre_tokenizer");
  t->model_ = std::make_unique<hf::Bpe>(model, path + ": model");
  t->decoder_ = hf::make_decoder(spec.value("decoder", json()), path + ": decoder");
  const hf::Template around = hf::make_template(spec.value("post_processor", json()), path + ": post_processor");
  t->template_before_ = around.before;
  t->template_after_ = around.after;
  t->vocabulary_size_ = t->model_->size();
  const json& added = spec.value("added_tokens", json::array());
  if (!added.is_array()) throw DataError(path + ": added_tokens: not a list");
  t->added_by_first_byte_.resize(256);
  for (size_t i = 0; i < added.size(); ++i) {
    const json& entry = added[i];
    const std::string where = path + ": added_tokens[" + std::to_string(i) + "]";
    if (!entry.is_object() || !entry.value("content", json()).is_string() ||
        entry["content"].get<std::string>().empty() || !entry.value("id", json()).is_number_unsigned() ||
        entry["id"].get<std::uint64_t>() > INT32_MAX ||
        entry["id"].get<std::int64_t>() > t->model_->size() + 1'000'000) {
      throw DataError(where + ": not a token with a non-empty content and an id near the vocabulary's");
    }
    AddedToken token{entry["content"].get<std::string>(), entry["id"].get<std::int32_t>(),
                     entry.value("special", false),       entry.value("normalized", !entry.value("special", false)),
                     entry.value("lstrip", false),        entry.value("rstrip", false),
                     entry.value("single_word", false)};
    if (!t->added_by_id_.emplace(token.id, t->added_.size()).second) {
      throw DataError(where + ": id " + std::to_string(token.id) + " is given twice");
    }
    t->vocabulary_size_ = std::max<std::int64_t>(t->vocabulary_size_, token.id + 1);
    t->added_by_first_byte_[static_cast<unsigned char>(token.content[0])].push_back(t->added_.size());
    t->added_.push_back(std::move(token));
  }
  for (const std::int32_t id : t->template_before_) t->check_template_id(id, path);
  for (const std::int32_t id : t->template_after_) t->check_template_id(id, path);
  for (auto& list : t->added_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [&](size_t a, size_t b) { return t->added_[a].content.size() > t->added_[b].content.size(); });
  }
  return t;
}

void HfTokenizer::check_template_id(std::int32_t id, const std::string& path) const {
  if (added_by_id_.count(id) == 0 && model_->token_of(id).empty()) {
    throw DataError(path + ": post_processor: the template's id " + std::to_string(id) +
                    " is neither an added token's nor in the vocabulary");
  }
}

// The added tokens in `text`, leftmost first and the longest where several start at one place;
// lstrip and rstrip take the whitespace beside them; a single_word token only between word
// boundaries.
std::vector<HfTokenizer::Match> HfTokenizer::added_matches(std::string_view text, bool normalized,
                                                           bool parse_special) const {
  std::vector<Match> out;
  size_t floor = 0;  // where the previous match ended
  for (size_t i = 0; i < text.size(); ++i) {
    for (const size_t k : added_by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const AddedToken& token = added_[k];
      if (token.normalized != normalized || (token.special && !parse_special)) continue;
      if (text.compare(i, token.content.size(), token.content) != 0) continue;
      size_t begin = i;
      size_t end = i + token.content.size();
      if (token.single_word &&
          ((begin > 0 && is_word_byte(text[begin - 1])) || (end < text.size() && is_word_byte(text[end])))) {
        continue;
      }
      while (token.lstrip && begin > floor && is_space_byte(text[begin - 1])) --begin;
      while (token.rstrip && end < text.size() && is_space_byte(text[end])) ++end;
      out.push_back({begin, end, &token});
      floor = end;
      i = end - 1;
      break;
    }
  }
  return out;
}

std::vector<std::int32_t> HfTokenizer::encode(std::string_view utf8, const EncodeOptions& options) const {
  const std::string text = valid_utf8(utf8);
  std::vector<std::int32_t> out;
  if (options.add_special_tokens) out = template_before_;
  WordCache cache;
  size_t at = 0;
  // Tokens that are not normalized are found in the text as given; the rest is normalized and
  // searched for the others.
  for (const Match& m : added_matches(text, /*normalized=*/false, options.parse_special)) {
    encode_normalized(text.substr(at, m.begin - at), options.parse_special, cache, out);
    out.push_back(m.token->id);
    at = m.end;
  }
  encode_normalized(text.substr(at), options.parse_special, cache, out);
  if (options.add_special_tokens) out.insert(out.end(), template_after_.begin(), template_after_.end());
  return out;
}

void HfTokenizer::encode_normalized(std::string text, bool parse_special, WordCache& cache,
                                    std::vector<std::int32_t>& out) const {
  if (text.empty()) return;
  if (normalizer_) normalizer_->normalize(text);
  size_t at = 0;
  for (const Match& m : added_matches(text, /*normalized=*/true, parse_special)) {
    encode_words(text.substr(at, m.begin - at), cache, out);
    out.push_back(m.token->id);
    at = m.end;
  }
  encode_words(text.substr(at), cache, out);
}

void HfTokenizer::encode_words(std::string text, WordCache& cache, std::vector<std::int32_t>& out) const {
  if (text.empty()) return;
  std::vector<std::string> pieces{std::move(text)};
  if (pre_tokenizer_) pre_tokenizer_->split(pieces);
  for (const std::string& piece : pieces) {
    if (const auto found = cache.find(piece); found != cache.end()) {
      out.insert(out.end(), found->second.begin(), found->second.end());
      continue;
    }
    std::vector<std::int32_t> ids;
    model_->encode(piece, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cache.size() < kCachedWords) cache.emplace(piece, std::move(ids));
  }
}

std::string HfTokenizer::decode(const std::vector<std::int32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  for (const std::int32_t id : ids) {
    if (const auto added = added_by_id_.find(id); added != added_by_id_.end()) {
      const AddedToken& token = added_[added->second];
      if (!(skip_special && token.special)) tokens.push_back(token.content);
      continue;
    }
    const std::string& token = model_->token_of(id);
    if (token.empty()) throw DataError("token id " + std::to_string(id) + " is not in the tokenizer's vocabulary");
    tokens.push_back(token);
  }
  if (decoder_) decoder_->decode(tokens);
  std::string text;
  for (const std::string& token : tokens) {
    if (!decoder_ && !text.empty()) text += ' ';  // tokenizers joins them so without a decoder
    text += token;
  }
  return text;
}

std::optional<std::int32_t> HfTokenizer::token_id(std::string_view token) const {
  for (const AddedToken& added : added_) {
    if (added.content == token) return added.id;
  }
  return model_->id_of(token);
}

}  // namespace hpctrain::data
