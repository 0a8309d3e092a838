#include "hpctrain/data/tokenizer.h"

#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "hpctrain/core/error.h"
#include "hpctrain/data/gpt2_tokenizer.h"
#include "hpctrain/data/hf_tokenizer.h"
#include "hpctrain/data/manifest.h"

namespace hpctrain::data {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<std::int32_t> encode(std::string_view text) const override {
    std::vector<std::int32_t> ids;
    for (const char c : text) ids.push_back(static_cast<std::uint8_t>(c));
    return ids;
  }
  std::string decode(const std::vector<std::int32_t>& ids) const override {
    std::string text;
    for (const std::int32_t id : ids) {
      if (id < 0 || id > 255) throw DataError("token id " + std::to_string(id) + " is not a byte");
      text += static_cast<char>(id);
    }
    return text;
  }
  std::int64_t vocabulary_size() const override { return 256; }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::string file_crc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot read");
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<char> block(1 << 20);
  while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(block.data()), static_cast<uInt>(in.gcount()));
  }
  char text[16];
  std::snprintf(text, sizeof text, "%08lx", static_cast<unsigned long>(crc));
  return std::string("crc32:") + text;
}

std::unique_ptr<Tokenizer> dataset_tokenizer(const std::string& dataset_dir, const Manifest& manifest) {
  if (manifest.tokenizer.name == "bytes") return make_byte_tokenizer();
  const std::filesystem::path dir = std::filesystem::path(dataset_dir) / "tokenizer";
  for (const auto& [file, checksum] : manifest.tokenizer.files) {
    const std::string path = (dir / file).string();
    if (file_crc32(path) != checksum) {
      throw DataError(path + ": its checksum is not the one the manifest records (" + checksum +
                      "); the dataset's tokenizer was changed: prepare the text again");
    }
  }
  if (manifest.tokenizer.name == "hf") return HfTokenizer::load((dir / "tokenizer.json").string());
  return std::make_unique<Gpt2Tokenizer>(
      Gpt2Tokenizer::load((dir / "encoder.json").string(), (dir / "vocab.bpe").string()));
}

}  // namespace hpctrain::data
