// A Hugging Face tokenizer.json (Llama 3's, Qwen's, Mistral's, GPT-2's as transformers saves it):
// added tokens matched first, then the normalizer, the pre-tokenizer and the BPE model on the
// rest, and the post-processor's template around it; decoding through its decoder. The reference
// is Hugging Face's tokenizers (tests/e2e/hf_tokenizer_e2e_test.cpp); a component this reader
// does not implement is refused in one line naming it. Depends on core.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hpctrain/data/tokenizer.h"

namespace hpctrain::data {

namespace hf {
class Normalizer;
class PreTokenizer;
class Decoder;
class Bpe;
}  // namespace hf

struct EncodeOptions {
  bool add_special_tokens = false;  // the post-processor's template (Llama 3's <|begin_of_text|>)
  // Special tokens' strings in the text become their ids; false encodes them as plain text, for
  // text a user typed.
  bool parse_special = true;
};

class HfTokenizer final : public Tokenizer {
 public:
  // `path`: tokenizer.json, or a directory holding it. Checks its size before reading it, and
  // every component. Throws DataError naming the file and the key.
  static std::unique_ptr<HfTokenizer> load(const std::string& path);
  ~HfTokenizer() override;

  // The text's ids without the template, special tokens' strings matched (as transformers'
  // tokenizer.encode(text, add_special_tokens=False)).
  std::vector<std::int32_t> encode(std::string_view utf8) const override { return encode(utf8, {}); }
  std::vector<std::int32_t> encode(std::string_view utf8, const EncodeOptions& options) const;
  // The text of the ids, special tokens kept; an id outside the vocabulary is a DataError.
  std::string decode(const std::vector<std::int32_t>& ids) const override { return decode(ids, false); }
  std::string decode(const std::vector<std::int32_t>& ids, bool skip_special) const;
  // The largest id + 1, added tokens included.
  std::int64_t vocabulary_size() const override { return vocabulary_size_; }
  // A token's id (an added token's or the model's), if it has one.
  std::optional<std::int32_t> token_id(std::string_view token) const;

 private:
  struct AddedToken {
    std::string content;
    std::int32_t id = 0;
    bool special = false;
    bool normalized = false;
    bool lstrip = false;
    bool rstrip = false;
    bool single_word = false;
  };
  struct Match {
    size_t begin;
    size_t end;
    const AddedToken* token;
  };

  using WordCache = std::unordered_map<std::string, std::vector<std::int32_t>>;  // a pre-token's ids

  HfTokenizer();
  void check_template_id(std::int32_t id, const std::string& path) const;
  std::vector<Match> added_matches(std::string_view text, bool normalized, bool parse_special) const;
  void encode_normalized(std::string text, bool parse_special, WordCache& cache, std::vector<std::int32_t>& out) const;
  void encode_words(std::string text, WordCache& cache, std::vector<std::int32_t>& out) const;

  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::Bpe> model_;
  std::unique_ptr<hf::Decoder> decoder_;
  std::vector<std::int32_t> template_before_;
  std::vector<std::int32_t> template_after_;
  std::vector<AddedToken> added_;
  std::map<std::int32_t, size_t> added_by_id_;
  std::vector<std::vector<size_t>> added_by_first_byte_;  // 256 lists, the longest content first
  std::int64_t vocabulary_size_ = 0;
};

}  // namespace hpctrain::data
