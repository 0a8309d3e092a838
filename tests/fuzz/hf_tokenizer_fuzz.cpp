// A Hugging Face tokenizer.json, as `hpctrain tokenize` (and the chat path after it) reads it: the
// input is the file. An accepted tokenizer must encode a text with every kind of character into
// ids inside its vocabulary, with and without its special tokens and template, and decode them.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "fuzz_target.h"
#include "hpctrain/core/error.h"
#include "hpctrain/data/hf_tokenizer.h"

namespace hpctrain::fuzz {
namespace {

const char* const kText = "Hello, it's  naïve e\xcc\x81 日本 😀 123456\r\n\n x\t<|end|>";

// A byte-level BPE of every printable ASCII byte, with most of the components real files use.
std::string seed_tokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  std::int32_t id = 0;
  for (char c = '!'; c <= '~'; ++c) vocab[std::string(1, c)] = id++;
  vocab["\xc4\xa0"] = id++;  // GPT-2's alphabet's space, U+0120
  vocab["He"] = id++;
  vocab["ll"] = id++;
  const nlohmann::json spec = {
      {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Strip"}}}}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", R"(\p{N}{1,3}| ?\p{L}+|\s+(?!\S)|\s+|.)"}}},
           {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"H e", "l l"}}, {"ignore_merges", true}}},
      {"added_tokens", {{{"id", id}, {"content", "<|end|>"}, {"special", true}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<|end|>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
        {"special_tokens", {{"<|end|>", {{"id", "<|end|>"}, {"ids", {id}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}}};
  return spec.dump();
}

}  // namespace

void write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  write_file(dir + "/tokenizer.json", seed_tokenizer());
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  static const std::string path = fuzz::scratch_dir() + "/tokenizer.json";
  fuzz::write_file(path, std::string(reinterpret_cast<const char*>(data), size));
  try {
    const std::unique_ptr<data::HfTokenizer> tokenizer = data::HfTokenizer::load(path);
    for (const bool special : {false, true}) {
      const std::vector<std::int32_t> ids = tokenizer->encode(fuzz::kText, {special, special});
      for (const std::int32_t id : ids) {
        if (id < 0 || id >= tokenizer->vocabulary_size()) throw std::logic_error("an id outside the vocabulary");
      }
      tokenizer->decode(ids, special);
    }
  } catch (const Error& e) {
    if (e.code() != ExitCode::kData) throw;
    fuzz::record(fuzz::Outcome::kRefused);
    return 0;
  }
  fuzz::record(fuzz::Outcome::kAccepted);
  return 0;
}
