// Text to a token stream: every byte one token (vocabulary 256), or GPT-2's BPE tokens, whose two
// files the dataset keeps in tokenizer/ (the manifest records them). Tokens are stored as uint16,
// which holds GPT-2's 50,257. The last --test-fraction of the tokens becomes the "val" split.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "hpctrain/core/error.h"
#include "hpctrain/data/gpt2_tokenizer.h"
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

// The text's tokens, and the manifest's vocabulary and tokenizer (its files copied into temp_dir).
std::vector<std::uint16_t> tokenize(const ImportOptions& options, const std::string& temp_dir, Manifest& manifest) {
  const std::vector<std::uint8_t> bytes = read_text(options.source);
  if (options.tokenizer == "bytes") {
    if (!options.vocab.empty() || !options.merges.empty()) {
      throw ConfigError("prepare text: --vocab and --merges are GPT-2's files; add --tokenizer gpt2");
    }
    manifest.num_classes = 256;
    return {bytes.begin(), bytes.end()};
  }
  if (options.tokenizer != "gpt2") {
    throw ConfigError("prepare text: --tokenizer '" + options.tokenizer + "' is not bytes or gpt2");
  }
  if (options.vocab.empty() || options.merges.empty()) {
    throw ConfigError("prepare text: --tokenizer gpt2 needs --vocab encoder.json and --merges vocab.bpe");
  }
  const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(options.vocab, options.merges);
  const std::vector<std::int32_t> ids =
      tokenizer.encode(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
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
  const std::vector<std::uint16_t> tokens = tokenize(options, temp_dir, manifest);
  const auto total = static_cast<std::int64_t>(tokens.size());
  const auto val = static_cast<std::int64_t>(static_cast<double>(total) * options.test_fraction);
  if (val < 1 || total - val < 1) {
    throw DataError(options.source + ": " + std::to_string(total) + " tokens of text are too few for "
                    "a train and a val split");
  }
  manifest.name = fs::path(options.source).filename().string();
  manifest.fields = {{"tokens", io::DType::kUInt16, {}}};
  manifest.input_mean = 0.0;
  manifest.input_std = 1.0;
  std::int64_t train = total - val;
  std::int64_t held_out = val;
  if (options.limit > 0) {
    train = std::min(train, options.limit);
    held_out = std::min(held_out, options.limit);
  }
  manifest.splits["train"] = write_split(temp_dir, "train", manifest.fields, {tokens.data()}, train,
                                         options.sharding);
  manifest.splits["val"] = write_split(temp_dir, "val", manifest.fields, {tokens.data() + (total - val)},
                                       held_out, options.sharding);
}

}  // namespace hpctrain::data
