#include "hpctrain/io/h5_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

namespace hpctrain::io {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("hpctrain_h5_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(H5File, RoundTripsDatasetsRowsAndAttributes) {
  const std::string path = temp_path("roundtrip.h5");
  std::vector<float> values(6 * 4);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  {
    H5File file = H5File::create(path, ExitCode::kData);
    WriteOptions chunked;
    chunked.chunk_rows = 2;
    chunked.deflate_level = 1;
    file.write("group/sub/values", DType::kFloat32, {6, 4}, values.data(), chunked);
    const std::int64_t scalar = 42;
    file.write("scalar", DType::kInt64, {}, &scalar);
    file.set_attr("name", std::string("hello"));
    file.set_attr("count", std::int64_t{7});
    file.close();
  }
  const H5File file = H5File::open_read(path, ExitCode::kData);
  const DatasetInfo info = file.info("group/sub/values");
  EXPECT_EQ(info.dtype, DType::kFloat32);
  EXPECT_EQ(info.shape, (std::vector<std::int64_t>{6, 4}));
  std::vector<float> all(24);
  file.read("group/sub/values", DType::kFloat32, all.data());
  EXPECT_EQ(all, values);
  std::vector<float> rows(8);
  file.read_rows("group/sub/values", DType::kFloat32, 3, 2, rows.data());
  EXPECT_EQ(rows, std::vector<float>(values.begin() + 12, values.begin() + 20));
  EXPECT_EQ(file.attr_string("name"), "hello");
  EXPECT_EQ(file.attr_int("count"), 7);
  EXPECT_TRUE(file.exists("group/sub/values"));
  EXPECT_FALSE(file.exists("group/missing/values"));
  EXPECT_EQ(file.list_datasets("group"), std::vector<std::string>{"sub/values"});
  EXPECT_THROW(file.read_rows("group/sub/values", DType::kFloat32, 5, 2, rows.data()), Error);
  fs::remove(path);
}

TEST(H5File, ErrorsCarryTheCallersExitCodeAndPath) {
  const std::string path = temp_path("not_hdf5.h5");
  std::ofstream(path) << "this is not HDF5";
  try {
    H5File::open_read(path, ExitCode::kCheckpoint);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kCheckpoint);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("not an HDF5 file"), std::string::npos);
  }
  fs::remove(path);
  EXPECT_THROW(H5File::open_read(path, ExitCode::kData), Error);
}

TEST(H5File, ChecksumCatchesAFlippedByte) {
  const std::string path = temp_path("flipped.h5");
  std::vector<std::uint8_t> data(64 * 1024, 0x5A);
  {
    H5File file = H5File::create(path, ExitCode::kData);
    WriteOptions options;
    options.chunk_rows = 1024;
    file.write("bytes", DType::kUInt8, {64, 1024}, data.data(), options);
    file.close();
  }
  // Flip one byte in the middle of the raw data (the file is mostly the 0x5A payload).
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(fs::file_size(path) / 2));
  f.put(static_cast<char>(0x00));
  f.close();
  const H5File file = H5File::open_read(path, ExitCode::kData);
  std::vector<std::uint8_t> out(data.size());
  EXPECT_THROW(file.read("bytes", DType::kUInt8, out.data()), Error);
  fs::remove(path);
}

// A loader thread reading shards while a checkpoint is written on another thread (ckpt.async):
// without io's process-wide lock this non-thread-safe HDF5 corrupts its state or crashes.
TEST(H5File, ThreadsMayReadAndWriteAtOnce) {
  const std::string source = temp_path("threads-source.h5");
  std::vector<std::int32_t> rows(4096);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int32_t>(i * 7);
  {
    H5File file = H5File::create(source, ExitCode::kData);
    WriteOptions chunked;
    chunked.chunk_rows = 64;
    file.write("rows", DType::kInt32, {4096}, rows.data(), chunked);
    file.close();
  }
  std::atomic<bool> writing{true};
  std::atomic<int> bad_reads{0};
  std::thread reader([&] {
    const H5File file = H5File::open_read(source, ExitCode::kData);
    const H5Dataset set = file.open_dataset("rows", 0);
    std::vector<std::int32_t> got(64);
    for (std::int64_t i = 0; writing || i < 200; ++i) {
      const std::int64_t first = (i * 97) % (4096 - 64);
      set.read_rows(DType::kInt32, first, 64, got.data());
      if (!std::equal(got.begin(), got.end(), rows.begin() + first)) ++bad_reads;
    }
  });
  std::vector<float> values(1000);
  for (int f = 0; f < 20; ++f) {
    const std::string path = temp_path("threads-" + std::to_string(f) + ".h5");
    H5File file = H5File::create(path, ExitCode::kCheckpoint);
    for (int d = 0; d < 20; ++d) {
      std::fill(values.begin(), values.end(), static_cast<float>(f * 100 + d));
      WriteOptions chunked;
      chunked.chunk_rows = 100;
      file.write("group/values-" + std::to_string(d), DType::kFloat32, {1000}, values.data(), chunked);
    }
    file.close();
    const H5File back = H5File::open_read(path, ExitCode::kCheckpoint);
    back.read("group/values-19", DType::kFloat32, values.data());
    EXPECT_EQ(values[999], static_cast<float>(f * 100 + 19));
    fs::remove(path);
  }
  writing = false;
  reader.join();
  EXPECT_EQ(bad_reads, 0);
  fs::remove(source);
}

}  // namespace
}  // namespace hpctrain::io
