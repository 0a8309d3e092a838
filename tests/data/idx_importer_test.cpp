// IDX bytes -> HDF5 shards -> tensors: the importer must round-trip every byte and label.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

#include "hpctrain/core/error.h"
#include "hpctrain/data/importers.h"
#include "hpctrain/data/manifest.h"
#include "hpctrain/data/split.h"
#include "hpctrain/core/system.h"

namespace hpctrain::data {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> idx_bytes(const std::vector<std::uint32_t>& dims, const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> out{0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (const std::uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(d >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_file(const fs::path& path, const std::vector<std::uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen((path.string() + ".gz").c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
  }
}

class IdxImporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("hpctrain_idx_" + std::to_string(::getpid()));
    hpctrain::sys::remove_tree(root_);
    fs::create_directories(root_ / "raw");
  }
  void TearDown() override { hpctrain::sys::remove_tree(root_); }

  // n images of 4x3 pixels with pixel value (i*12 + j) % 256, label i % 10.
  void write_split(const std::string& prefix, std::uint32_t n, bool gzip) {
    std::vector<std::uint8_t> pixels(n * 12);
    for (size_t j = 0; j < pixels.size(); ++j) pixels[j] = static_cast<std::uint8_t>((j * 7) % 256);
    std::vector<std::uint8_t> labels(n);
    for (std::uint32_t i = 0; i < n; ++i) labels[i] = static_cast<std::uint8_t>(i % 10);
    write_file(root_ / "raw" / (prefix + "-images-idx3-ubyte"), idx_bytes({n, 4, 3}, pixels), gzip);
    write_file(root_ / "raw" / (prefix + "-labels-idx1-ubyte"), idx_bytes({n}, labels), gzip);
  }

  fs::path root_;
};

TEST_F(IdxImporterTest, RoundTripsEveryPixelAndLabelAcrossShards) {
  write_split("train", 25, /*gzip=*/true);
  write_split("t10k", 7, /*gzip=*/false);
  ImportOptions options;
  options.source = (root_ / "raw").string();
  options.out = (root_ / "out").string();
  options.sharding.shards = 3;
  options.sharding.deflate_level = 1;
  import_dataset("mnist", options);

  const Manifest m = Manifest::load(options.out);
  EXPECT_EQ(m.fields[0].shape, (std::vector<std::int64_t>{1, 4, 3}));
  EXPECT_EQ(m.split("train").samples(), 25);
  ASSERT_EQ(m.split("train").shards.size(), 3u);
  EXPECT_EQ(m.split("train").shards[0].samples, 8);  // 25 = 8 + 8 + 9
  EXPECT_EQ(m.split("train").shards[2].samples, 9);
  EXPECT_EQ(m.split("test").samples(), 7);

  const Split train = Split::load(options.out, "train");
  std::vector<std::int64_t> all(25);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
  const Batch batch = train.gather(all);
  ASSERT_EQ(batch.input.scalar_type(), at::kByte);  // the stored bytes, exactly
  const at::Tensor normalized = train.normalize(batch.input);
  for (std::int64_t j = 0; j < 25 * 12; ++j) {
    const double pixel = static_cast<double>((j * 7) % 256);
    ASSERT_EQ(batch.input.flatten()[j].item<std::int64_t>(), (j * 7) % 256) << j;
    ASSERT_NEAR(normalized.flatten()[j].item<double>(), (pixel / 255.0 - m.input_mean) / m.input_std, 1e-5) << j;
  }
  for (std::int64_t i = 0; i < 25; ++i) ASSERT_EQ(batch.target[i].item<std::int64_t>(), i % 10);
}

TEST_F(IdxImporterTest, TruncatedIdxIsADataErrorAndLeavesNoOutput) {
  write_split("train", 5, false);
  write_split("t10k", 5, false);
  fs::resize_file(root_ / "raw" / "t10k-images-idx3-ubyte", 30);
  ImportOptions options;
  options.source = (root_ / "raw").string();
  options.out = (root_ / "out").string();
  try {
    import_dataset("fashion-mnist", options);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(root_ / "out"));
  for (const auto& entry : fs::directory_iterator(root_)) {
    EXPECT_EQ(entry.path().filename().string().find("out"), std::string::npos) << entry.path();
  }
}

// The header's sizes against the data that is there, gzipped or not: a byte too many, a byte too
// few past the first MiB (the reader grows its buffer as data comes), a size of 0, and sizes whose
// product overflows.
TEST_F(IdxImporterTest, DataThatDoesNotMatchTheHeaderIsRefusedNamingTheFile) {
  ImportOptions options;
  options.source = (root_ / "raw").string();
  options.out = (root_ / "out").string();
  const auto refusal = [&](const std::vector<std::uint8_t>& images, bool gzip) {
    write_split("train", 5, gzip);
    write_split("t10k", 5, gzip);
    write_file(root_ / "raw" / "train-images-idx3-ubyte", images, gzip);
    try {
      import_dataset("fashion-mnist", options);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  for (const bool gzip : {false, true}) {
    const std::string file = std::string("train-images-idx3-ubyte") + (gzip ? ".gz" : "");
    EXPECT_NE(refusal(idx_bytes({5, 4, 3}, std::vector<std::uint8_t>(61)), gzip)
                  .find(file + ": truncated or oversized (expected 76 bytes, found 77)"),
              std::string::npos);
    EXPECT_NE(refusal(idx_bytes({90000, 4, 3}, std::vector<std::uint8_t>(90000 * 12 - 1)), gzip)
                  .find(file + ": truncated or oversized (expected 1080016 bytes, found 1080015)"),
              std::string::npos);
    EXPECT_NE(refusal(idx_bytes({5, 0, 3}, {}), gzip).find(file + ": a size of 0 in the header"), std::string::npos);
    EXPECT_NE(refusal(idx_bytes({0xffffffff, 0xffffffff, 0xffffffff}, {}), gzip)
                  .find(file + ": sizes in the header too large"),
              std::string::npos);
    fs::remove(root_ / "raw" / file);
  }
  EXPECT_FALSE(fs::exists(root_ / "out"));
}

TEST(Compression, ParsesNoneDeflateAndLevels) {
  EXPECT_EQ(parse_compression("none"), 0);
  EXPECT_EQ(parse_compression("deflate"), 4);
  EXPECT_EQ(parse_compression("deflate:9"), 9);
  EXPECT_THROW(parse_compression("deflate:0"), ConfigError);
  EXPECT_THROW(parse_compression("gzip"), ConfigError);
}

}  // namespace
}  // namespace hpctrain::data
