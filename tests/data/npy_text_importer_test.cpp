// npy and text importers: bytes in, the same values out of the HDF5 shards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "hpctrain/core/error.h"
#include "hpctrain/data/importers.h"
#include "hpctrain/data/manifest.h"
#include "hpctrain/data/split.h"
#include "hpctrain/io/h5_file.h"
#include "hpctrain/core/system.h"

namespace hpctrain::data {
namespace {

namespace fs = std::filesystem;

// A version 1.0 .npy file with the header dict `header`, padded so the data starts at a multiple
// of 64.
void write_npy_with_header(const fs::path& path, std::string header, const void* data, size_t bytes) {
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const auto length = static_cast<std::uint16_t>(header.size());
  out.put(static_cast<char>(length & 0xff));
  out.put(static_cast<char>(length >> 8));
  out << header;
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

// A version 1.0 .npy file as NumPy writes one.
void write_npy(const fs::path& path, const std::string& descr, const std::string& shape,
               const void* data, size_t bytes) {
  write_npy_with_header(path, "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }",
                        data, bytes);
}

class ImporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("hpctrain_imp_" + std::to_string(::getpid()));
    hpctrain::sys::remove_tree(root_);
    fs::create_directories(root_ / "src");
  }
  void TearDown() override { hpctrain::sys::remove_tree(root_); }
  ImportOptions options() const {
    ImportOptions o;
    o.source = (root_ / "src").string();
    o.out = (root_ / "out").string();
    return o;
  }
  // The message of the DataError an npy import of src/ fails with, or "accepted".
  std::string refusal() const {
    try {
      import_dataset("npy", options());
    } catch (const DataError& e) {
      return e.what();
    }
    return "accepted";
  }
  fs::path root_;
};

TEST_F(ImporterTest, NpyRoundTripsFloatsAndLabelsAndHoldsOutATestSplit) {
  std::vector<float> x(20 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.25f - 3.0f;
  std::vector<std::int64_t> y(20);
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i % 4);
  write_npy(root_ / "src" / "X.npy", "<f4", "(20, 3)", x.data(), x.size() * 4);
  write_npy(root_ / "src" / "y.npy", "<i8", "(20,)", y.data(), y.size() * 8);
  ImportOptions o = options();
  o.test_fraction = 0.25;
  o.sharding.shards = 2;
  import_dataset("npy", o);

  const Manifest m = Manifest::load(o.out);
  EXPECT_EQ(m.num_classes, 4);
  EXPECT_EQ(m.fields[0].dtype, io::DType::kFloat32);
  EXPECT_EQ(m.fields[0].shape, std::vector<std::int64_t>{3});
  EXPECT_EQ(m.split("train").samples(), 15);
  EXPECT_EQ(m.split("test").samples(), 5);

  const Split test = Split::load(o.out, "test");
  const Batch batch = test.range(0, 5);
  const at::Tensor normalized = test.normalize(batch.input);
  for (std::int64_t i = 0; i < 15; ++i) {
    const double stored = x[static_cast<size_t>(45 + i)];
    EXPECT_EQ(batch.input.flatten()[i].item<double>(), static_cast<double>(static_cast<float>(stored)));
    EXPECT_NEAR(normalized.flatten()[i].item<double>(), (stored - m.input_mean) / m.input_std, 1e-4);
  }
  EXPECT_EQ(batch.target[0].item<std::int64_t>(), 15 % 4);
}

// Sizes a header states are checked against the file before memory is taken for them, so a
// damaged or hostile header is one line naming the file, not an allocation of what it claims.
TEST_F(ImporterTest, NpyHeadersAreCheckedAgainstTheFileBeforeAnythingIsAllocated) {
  std::vector<std::int64_t> y(10, 1);
  write_npy(root_ / "src" / "y.npy", "<i8", "(10,)", y.data(), y.size() * 8);
  const auto refusal_of = [&](const std::string& shape) {
    write_npy(root_ / "src" / "X.npy", "<f4", shape, nullptr, 0);
    return refusal();
  };
  EXPECT_NE(refusal_of("(1000000000000, 2, 3)").find("X.npy: truncated or oversized (shape (1000000000000, 2, 3) "
                                                 "needs 24000000000000 data bytes, found 0)"),
            std::string::npos);
  EXPECT_NE(refusal_of("(4611686018427387904, 4)").find("X.npy: shape (4611686018427387904, 4) is too large"),
            std::string::npos);
  EXPECT_NE(refusal_of("(99999999999999999999, 3)").find("is not a tuple of whole numbers below 2^63"), std::string::npos);
  EXPECT_NE(refusal_of("(10, 0)").find("X.npy: its samples are empty"), std::string::npos);
  EXPECT_NE(refusal_of("(0, 3)").find("X.npy: has no samples"), std::string::npos);
  EXPECT_FALSE(fs::exists(root_ / "out"));
}

TEST_F(ImporterTest, NpyInputsMustBeFinite) {
  std::vector<double> x(8, 0.5);
  x[5] = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::int64_t> y(4, 1);
  write_npy(root_ / "src" / "X.npy", "<f8", "(4, 2)", x.data(), x.size() * 8);
  write_npy(root_ / "src" / "y.npy", "<i8", "(4,)", y.data(), y.size() * 8);
  const std::string message = refusal();
  EXPECT_NE(message.find("X.npy: sample 2 holds nan; inputs must be finite"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(root_ / "out"));
}

// Column order would scramble every sample: only a header that says False is read. Python 2's
// shapes ("(4L, 2L)") are read as NumPy reads them.
TEST_F(ImporterTest, NpyFortranOrderIsRefusedAndPython2ShapesAreRead) {
  std::vector<float> x(8, 0.5f);
  std::vector<std::int64_t> y{0, 1, 2, 1};
  write_npy(root_ / "src" / "y.npy", "<i8", "(4,)", y.data(), y.size() * 8);
  write_npy_with_header(root_ / "src" / "X.npy", "{'descr': '<f4', 'fortran_order':\nTrue, 'shape': (4, 2), }",
                        x.data(), x.size() * 4);
  const std::string message = refusal();
  EXPECT_NE(message.find("X.npy: Fortran-ordered arrays are not supported"), std::string::npos) << message;
  EXPECT_NE(message.find("fortran_order is True"), std::string::npos) << message;
  write_npy(root_ / "src" / "X.npy", "<f4", "(4L, 2L)", x.data(), x.size() * 4);
  ImportOptions o = options();
  o.test_fraction = 0.25;
  import_dataset("npy", o);
  EXPECT_EQ(Manifest::load(o.out).fields[0].shape, std::vector<std::int64_t>{2});
}

TEST_F(ImporterTest, NpyLabelsMustBeClassIndices) {
  std::vector<float> x(4, 0.5f);
  std::vector<std::int64_t> y{0, 1, std::int64_t{1} << 40, 2};
  write_npy(root_ / "src" / "X.npy", "<f4", "(4,)", x.data(), x.size() * 4);
  write_npy(root_ / "src" / "y.npy", "<i8", "(4,)", y.data(), y.size() * 8);
  const std::string message = refusal();
  EXPECT_NE(message.find("y.npy: label 1099511627776 at 2 is not a class index from 0 to 2^31-1"), std::string::npos)
      << message;
}

TEST_F(ImporterTest, NpyMismatchedCountsAndMissingLabelsAreDataErrors) {
  std::vector<std::uint8_t> x(6, 1);
  std::vector<std::int64_t> y(5, 0);
  write_npy(root_ / "src" / "X.npy", "|u1", "(6,)", x.data(), x.size());
  write_npy(root_ / "src" / "y.npy", "<i8", "(5,)", y.data(), y.size() * 8);
  EXPECT_THROW(import_dataset("npy", options()), DataError);
  fs::remove(root_ / "src" / "y.npy");
  try {
    import_dataset("npy", options());
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("no y.npy"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(root_ / "out"));
}

TEST_F(ImporterTest, TextBecomesByteTokensWithAValSplit) {
  const std::string text = "hello, world! hello, hpctrain.";
  std::ofstream(root_ / "src" / "a.txt") << text.substr(0, 10);
  std::ofstream(root_ / "src" / "b.txt") << text.substr(10);
  ImportOptions o = options();
  o.test_fraction = 0.2;
  import_dataset("text", o);
  const Manifest m = Manifest::load(o.out);
  EXPECT_EQ(m.fields.size(), 1u);
  EXPECT_EQ(m.fields[0].dtype, io::DType::kUInt16);
  EXPECT_EQ(m.num_classes, 256);
  const std::int64_t val = static_cast<std::int64_t>(text.size() * 0.2);
  EXPECT_EQ(m.split("val").samples(), val);
  EXPECT_EQ(m.split("train").samples(), static_cast<std::int64_t>(text.size()) - val);

  std::vector<std::int32_t> tokens(static_cast<size_t>(val));
  const io::H5File shard = io::H5File::open_read(o.out + "/" + m.split("val").shards[0].file, ExitCode::kData);
  shard.read("tokens", io::DType::kInt32, tokens.data());
  for (std::int64_t i = 0; i < val; ++i) {
    EXPECT_EQ(tokens[static_cast<size_t>(i)], static_cast<unsigned char>(text[text.size() - val + i]));
  }
  try {
    Split::load(o.out, "train");
    FAIL() << "a token stream is not a classification dataset";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("token stream"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hpctrain::data
