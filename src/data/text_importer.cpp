// Text to a byte-level token stream: every byte is one token (vocabulary 256), stored as uint16 so
// tokenizers with larger vocabularies fit the same layout. The last --test-fraction of the bytes
// becomes the "val" split.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "hpctrain/core/error.h"
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

}  // namespace

void import_text(const ImportOptions& options, const std::string& temp_dir, Manifest& manifest) {
  const std::vector<std::uint8_t> bytes = read_text(options.source);
  const auto total = static_cast<std::int64_t>(bytes.size());
  const auto val = static_cast<std::int64_t>(static_cast<double>(total) * options.test_fraction);
  if (val < 1 || total - val < 1) {
    throw DataError(options.source + ": " + std::to_string(total) + " bytes of text are too few for "
                    "a train and a val split");
  }
  const std::vector<std::uint16_t> tokens(bytes.begin(), bytes.end());
  manifest.name = fs::path(options.source).filename().string();
  manifest.fields = {{"tokens", io::DType::kUInt16, {}}};
  manifest.num_classes = 256;  // the vocabulary
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
