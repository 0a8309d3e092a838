// What turns text into a token stream's ids and back: bytes (each byte one token, vocabulary 256,
// the default) or GPT-2's byte-level BPE (gpt2_tokenizer.h). A dataset's manifest says which one
// made it, so generation reads and writes text as its model was trained. Depends on core.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hpctrain::data {

struct Manifest;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  // The bytes the ids stand for (UTF-8 only if the ids end on a character's boundary); an id
  // outside the vocabulary is a DataError.
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;
  virtual std::int64_t vocabulary_size() const = 0;
};

std::unique_ptr<Tokenizer> make_byte_tokenizer();

// The tokenizer of the dataset at `dataset_dir`: its files (in <dataset>/tokenizer/) checked
// against the manifest's CRC-32s. Throws DataError.
std::unique_ptr<Tokenizer> dataset_tokenizer(const std::string& dataset_dir, const Manifest& manifest);

// "crc32:1a2b3c4d" of a file's bytes. Throws DataError.
std::string file_crc32(const std::string& path);

}  // namespace hpctrain::data
