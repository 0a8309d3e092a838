// Text to a token stream: every byte one token (vocabulary 256), GPT-2's BPE tokens, or a Hugging
// Face tokenizer.json's, whose files the dataset keeps in tokenizer/ (the manifest records them).
// Tokens are stored as uint16 where the vocabulary fits (GPT-2's 50,257), else as uint32 (Llama 3's
// 128,256). The last --test-fraction of the tokens becomes the "val" split.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "hpctrain/core/error.h"
#include "hpctrain/data/gpt2_tokenizer.h"
#include "hpctrain/data/hf_tokenizer.h"
#include "importer_formats.h"

namespace hpctrain::data {
namespace fs = std::filesystem;
namespace {

// A file, or every regular file under a directory in path order, concatenated.
std::vector<std::uint8_t> read_text(const std::string& source) {
  std::vector<fs::path> files;
  if (fs::is_directory(source)) {
    for (const auto& entry : fs::recursive_directory_iterator(source)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.emplace_back(source);
  }
  std::vector<std::uint8_t> bytes;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw DataError(path.string() + ": cannot read");
    bytes.insert(bytes.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return bytes;
}

// A tokenizer.json's tokens of the text, special tokens' strings in it kept as plain text; the file
// kept as the dataset's tokenizer.
std::vector<std::int32_t> tokenize_hf(const ImportOptions& options, std::string_view text, const std::string& temp_dir,
                                      Manifest& manifest) {
  if (!options.vocab.empty() || !options.merges.empty()) {
    throw ConfigError("prepare text: --vocab and --merges are GPT-2's files; a tokenizer.json needs neither");
  }
  const std::unique_ptr<HfTokenizer> tokenizer = HfTokenizer::load(options.tokenizer);
  const std::vector<std::int32_t> ids = tokenizer->encode(text, {/*add_special_tokens=*/false,
                                                                 /*parse_special=*/false});
  const fs::path kept = fs::path(temp_dir) / "tokenizer";
  fs::create_directories(kept);
  const fs::path source = fs::is_directory(options.tokenizer) ? fs::path(options.tokenizer) / "tokenizer.json"
                                                               : fs::path(options.tokenizer);
  fs::copy_file(source, kept / "tokenizer.json");
  manifest.tokenizer.name = "hf";
  manifest.tokenizer.files["tokenizer.json"] = file_crc32((kept / "tokenizer.json").string());
  manifest.num_classes = tokenizer->vocabulary_size();
  return ids;
}

// The text's tokens, and the manifest's vocabulary and tokenizer (its files copied into temp_dir).
std::vector<std::int32_t> tokenize(const ImportOptions& options, const std::string& temp_dir, Manifest& manifest) {
  const std::vector<std::uint8_t> bytes = read_text(options.source);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (options.tokenizer == "bytes") {
    if (!options.vocab.empty() || !options.merges.empty()) {
      throw ConfigError("prepare text: --vocab and --merges are GPT-2's files; add --tokenizer gpt2");
    }
    manifest.num_classes = 256;
    return {bytes.begin(), bytes.end()};
  }
  if (options.tokenizer != "gpt2") {
    if (!fs::exists(options.tokenizer)) {
      throw ConfigError("prepare text: --tokenizer '" + options.tokenizer +
                        "' is not bytes, gpt2, or a tokenizer.json (or a model directory holding one)");
    }
    return tokenize_hf(options, text, temp_dir, manifest);
  }
  if (options.vocab.empty() || options.merges.empty()) {
    throw ConfigError("prepare text: --tokenizer gpt2 needs --vocab encoder.json and --merges vocab.bpe");
  }
  const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(options.vocab, options.merges);
  const std::vector<std::int32_t> ids = tokenizer.encode(text);
  const fs::path kept = fs::path(temp_dir) / "tokenizer";
  fs::create_directories(kept);
  manifest.tokenizer.name = "gpt2";
  for (const auto& [name, source] : {std::pair<std::string, std::string>{"encoder.json", options.vocab},
                                     {"vocab.bpe", options.merges}}) {
    fs::copy_file(source, kept / name);
    manifest.tokenizer.files[name] = file_crc32((kept / name).string());
  }
  manifest.num_classes = tokenizer.vocabulary_size();
  return {ids.begin(), ids.end()};
}

}  // namespace

void import_text(const ImportOptions& options, const std::string& temp_dir, Manifest& manifest) {
  const std::vector<std::int32_t> ids = tokenize(options, temp_dir, manifest);
  const auto total = static_cast<std::int64_t>(ids.size());
  const auto val = static_cast<std::int64_t>(static_cast<double>(total) * options.test_fraction);
  if (val < 1 || total - val < 1) {
    throw DataError(options.source + ": " + std::to_string(total) + " tokens of text are too few for "
                    "a train and a val split");
  }
  manifest.name = fs::path(options.source).filename().string();
  // The narrowest of uint16 and uint32 that holds every id.
  const bool narrow = manifest.num_classes <= 65536;
  manifest.fields = {{"tokens", narrow ? io::DType::kUInt16 : io::DType::kUInt32, {}}};
  const std::vector<std::uint16_t> narrow_ids = narrow ? std::vector<std::uint16_t>(ids.begin(), ids.end())
                                                       : std::vector<std::uint16_t>();
  const std::vector<std::uint32_t> wide_ids = narrow ? std::vector<std::uint32_t>()
                                                     : std::vector<std::uint32_t>(ids.begin(), ids.end());
  const auto at = [&](std::int64_t i) -> const void* {
    return narrow ? static_cast<const void*>(narrow_ids.data() + i) : static_cast<const void*>(wide_ids.data() + i);
  };
  manifest.input_mean = 0.0;
  manifest.input_std = 1.0;
  std::int64_t train = total - val;
  std::int64_t held_out = val;
  if (options.limit > 0) {
    train = std::min(train, options.limit);
    held_out = std::min(held_out, options.limit);
  }
  manifest.splits["train"] = write_split(temp_dir, "train", manifest.fields, {at(0)}, train, options.sharding);
  manifest.splits["val"] = write_split(temp_dir, "val", manifest.fields, {at(total - val)}, held_out,
                                       options.sharding);
}

}  // namespace hpctrain::data
