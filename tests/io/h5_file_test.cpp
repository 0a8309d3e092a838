#include "hpctrain/io/h5_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>
#include <tuple>

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

// Element ranges of any shape, counted row-major, as the ranks of a sharded optimizer write and
// read them: every range of a 3-d tensor, written by turns from separate opens, reads back whole.
TEST(H5File, WritesAndReadsElementRangesRowMajor) {
  const std::string path = temp_path("ranges.h5");
  const std::vector<std::int64_t> shape{3, 4, 5};
  std::vector<float> values(60);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) + 0.25f;
  {
    H5File file = H5File::create(path, ExitCode::kCheckpoint);
    WriteOptions options;
    options.chunk_rows = 2;
    file.create("t", DType::kFloat32, shape, options);
    file.create("s", DType::kInt64, {});
    file.close();
  }
  // Cuts that start and end mid-row and mid-plane, and one of a single element.
  const std::vector<std::int64_t> cuts{0, 3, 4, 17, 20, 41, 60};
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    H5File file = H5File::open_write(path, ExitCode::kCheckpoint);
    file.write_range("t", DType::kFloat32, cuts[k], cuts[k + 1] - cuts[k], values.data() + cuts[k]);
    file.close();
  }
  {
    H5File file = H5File::open_write(path, ExitCode::kCheckpoint);
    const std::int64_t seven = 7;
    file.write_range("s", DType::kInt64, 0, 1, &seven);
    file.close();
  }
  const H5File file = H5File::open_read(path, ExitCode::kCheckpoint);
  std::vector<float> all(60);
  file.read("t", DType::kFloat32, all.data());
  EXPECT_EQ(all, values);
  for (const auto& [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 60}, {7, 1}, {19, 23}, {38, 22}, {5, 0}}) {
    std::vector<float> part(static_cast<size_t>(count));
    file.read_range("t", DType::kFloat32, first, count, part.data());
    EXPECT_EQ(part, std::vector<float>(values.begin() + first, values.begin() + first + count)) << first;
  }
  std::int64_t scalar = 0;
  file.read_range("s", DType::kInt64, 0, 1, &scalar);
  EXPECT_EQ(scalar, 7);
  float one = 0;
  try {
    file.read_range("t", DType::kFloat32, 59, 2, &one);
    FAIL() << "a range past the end";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("elements [59, 61) are outside the dataset of 60"), std::string::npos)
        << e.what();
    EXPECT_EQ(e.code(), ExitCode::kCheckpoint);
  }
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

// Note [Checksummed metadata]: files are written in HDF5's 1.10 format, whose superblock
// (version 3, byte 8 of the file; the 1.8 format's is 2) and every piece of metadata carry checksums.
TEST(H5File, WritesTheFormatWithChecksummedMetadata) {
  const std::string path = temp_path("format.h5");
  {
    H5File file = H5File::create(path, ExitCode::kData);
    const std::vector<float> data(16, 1.0F);
    file.write("group/values", DType::kFloat32, {4, 4}, data.data(), WriteOptions{2, true, 0});
    file.close();
  }
  std::ifstream in(path, std::ios::binary);
  char header[9] = {};
  in.read(header, sizeof header);
  EXPECT_EQ(std::string(header, 8), "\x89HDF\r\n\x1a\n");
  EXPECT_EQ(static_cast<int>(header[8]), 3) << "superblock version";
  fs::remove(path);
}

// Note [Layouts read safely]: two damaged files the fuzzers made (tests/fuzz/regressions), whose
// layout declares chunks larger than the dataset, on which HDF5 would read past its own buffer.
// Opening the dataset is refused; the file's other datasets still read.
TEST(H5File, RefusesChunksLargerThanTheDataset) {
  const std::string regressions = std::string(HPCTRAIN_SOURCE_DIR) + "/tests/fuzz/regressions/";
  for (const auto& [file_name, damaged, sound] :
       {std::tuple<std::string, std::string, std::string>{"shard/chunks-larger-than-the-dataset-f0340641.h5", "image", "label"},
        {"checkpoint/chunks-larger-than-the-dataset-86273722.h5", "optim/layers.2.weight/exp_avg", "optim/layers.2.weight/exp_avg_sq"}}) {
    const H5File file = H5File::open_read(regressions + file_name, ExitCode::kData);
    try {
      file.info(damaged);
      FAIL() << file_name << ": expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kData);
      EXPECT_NE(std::string(e.what()).find("dataset '" + damaged + "' is stored in a layout hpctrain never writes"),
                std::string::npos) << e.what();
    }
    std::vector<double> buffer(1024);
    EXPECT_THROW(file.read(damaged, file.info(sound).dtype, buffer.data()), Error) << file_name;
    EXPECT_NO_THROW(file.info(sound)) << file_name;
  }
}

// A dataset 'bytes' of 64 rows of 1024 bytes 0x5A, chunked with fletcher32, with one byte in the
// middle of the file zeroed: the payload is most of the file, so the byte lies in one chunk.
void write_with_a_flipped_byte(const std::string& path, std::int64_t chunk_rows) {
  const std::vector<std::uint8_t> data(64 * 1024, 0x5A);
  {
    H5File file = H5File::create(path, ExitCode::kData);
    WriteOptions options;
    options.chunk_rows = chunk_rows;
    file.write("bytes", DType::kUInt8, {64, 1024}, data.data(), options);
    file.close();
  }
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(fs::file_size(path) / 2));
  f.put(static_cast<char>(0x00));
}

// Note [Raw chunk writes]: the chunks a write covers whole are stored raw with io::fletcher32's
// checksum; HDF5's own reads, which check it, must read back what was written, whatever the
// ranges, the partial chunks at their ends and the padded edge chunk included.
TEST(H5File, WholeChunksWrittenRawReadBackThroughHdf5) {
  const std::string path = temp_path("raw-writes.h5");
  std::vector<float> values(10 * 3);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 1.5f - 7.0f;
  std::vector<std::int64_t> longs(8 * 5);
  for (size_t i = 0; i < longs.size(); ++i) longs[i] = static_cast<std::int64_t>(i * i) - 11;
  WriteOptions two_rows;
  two_rows.chunk_rows = 2;
  {
    H5File file = H5File::create(path, ExitCode::kCheckpoint);
    file.create("ranges", DType::kFloat32, {10, 3}, two_rows);  // 5 chunks of 6 elements
    for (const auto& [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 1}, {1, 25}, {26, 4}}) {
      file.write_range("ranges", DType::kFloat32, first, count, values.data() + first);
    }
    WriteOptions three_rows;
    three_rows.chunk_rows = 3;  // 2 whole chunks and an edge chunk of 2 rows
    file.write("whole", DType::kInt64, {8, 5}, longs.data(), three_rows);
    file.close();
  }
  const H5File file = H5File::open_read(path, ExitCode::kCheckpoint);
  std::vector<float> read_values(values.size());
  file.read("ranges", DType::kFloat32, read_values.data());
  EXPECT_EQ(read_values, values);
  std::vector<std::int64_t> read_longs(longs.size());
  file.read("whole", DType::kInt64, read_longs.data());
  EXPECT_EQ(read_longs, longs);
  const H5Dataset rows = file.open_dataset("ranges", 0);
  std::vector<float> chunk(6);
  rows.read_rows(DType::kFloat32, 4, 2, chunk.data());  // a whole chunk: read raw, its checksum checked
  EXPECT_EQ(chunk, std::vector<float>(values.begin() + 12, values.begin() + 18));
  EXPECT_GE(rows.raw_chunk_reads(), 1);
  fs::remove(path);
}

TEST(H5File, ChecksumCatchesAFlippedByte) {
  const std::string path = temp_path("flipped.h5");
  write_with_a_flipped_byte(path, 1024);
  const H5File file = H5File::open_read(path, ExitCode::kData);
  std::vector<std::uint8_t> out(64 * 1024);
  EXPECT_THROW(file.read("bytes", DType::kUInt8, out.data()), Error);
  fs::remove(path);
}

// Note [Raw chunk reads]: whole chunks of a checksum-only dataset are read raw and checked by
// io::fletcher32; a mismatch with the value HDF5 stored would fail these reads.
TEST(H5Dataset, ReadsWholeChunksRawAndChecksThem) {
  const std::string path = temp_path("raw-chunks.h5");
  // 7-byte rows, 5 rows a chunk: odd chunk sizes, a partial last chunk, and chunks of 0xff (where
  // HDF5's sums wrap), of zeros and of varied bytes.
  std::vector<std::uint8_t> rows(23 * 7);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = i < 35 ? 0xff : i < 70 ? 0x00 : static_cast<std::uint8_t>(i * 37);
  std::vector<float> floats(23 * 3);
  for (size_t i = 0; i < floats.size(); ++i) floats[i] = static_cast<float>(i) * 0.25f;
  {
    H5File file = H5File::create(path, ExitCode::kData);
    WriteOptions options;
    options.chunk_rows = 5;
    file.write("bytes", DType::kUInt8, {23, 7}, rows.data(), options);
    file.write("floats", DType::kFloat32, {23, 3}, floats.data(), options);
    options.deflate_level = 1;
    file.write("deflated", DType::kUInt8, {23, 7}, rows.data(), options);
    file.close();
  }
  const H5File file = H5File::open_read(path, ExitCode::kData);
  const H5Dataset bytes = file.open_dataset("bytes", 0);
  std::vector<std::uint8_t> got(rows.size());
  for (std::int64_t first = 0; first < 23; first += 5) {
    const std::int64_t count = std::min<std::int64_t>(5, 23 - first);
    bytes.read_rows(DType::kUInt8, first, count, got.data() + first * 7);
  }
  EXPECT_EQ(got, rows);
  EXPECT_EQ(bytes.raw_chunk_reads(), 5);

  std::vector<float> got_floats(floats.size());
  const H5Dataset float_set = file.open_dataset("floats", 0);
  for (std::int64_t first = 0; first < 23; first += 5) {
    float_set.read_rows(DType::kFloat32, first, std::min<std::int64_t>(5, 23 - first), got_floats.data() + first * 3);
  }
  EXPECT_EQ(got_floats, floats);
  EXPECT_EQ(float_set.raw_chunk_reads(), 5);
  std::vector<double> as_double(15);
  float_set.read_rows(DType::kFloat64, 5, 5, as_double.data());  // a conversion: through HDF5
  EXPECT_EQ(as_double[0], 3.75);
  EXPECT_EQ(float_set.raw_chunk_reads(), 5);

  // Rows across chunks, and a compressed dataset, take HDF5's own path.
  bytes.read_rows(DType::kUInt8, 3, 5, got.data());
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + 35, rows.begin() + 21));
  EXPECT_EQ(bytes.raw_chunk_reads(), 5);
  const H5Dataset deflated = file.open_dataset("deflated", 0);
  deflated.read_rows(DType::kUInt8, 5, 5, got.data());
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + 35, rows.begin() + 35));
  EXPECT_EQ(deflated.raw_chunk_reads(), 0);
  EXPECT_EQ(deflated.raw_chunk_bytes(), 0);

  // With room for a stored chunk (5 rows and the 4-byte checksum), a chunk is read in place: its
  // rows land where asked, and the room past them holds what the file stores after them.
  ASSERT_EQ(bytes.raw_chunk_bytes(), 5 * 7 + 4);
  for (std::int64_t first = 0; first < 23; first += 5) {
    std::vector<std::uint8_t> room(5 * 7 + 4, 0xAA);
    const std::int64_t count = std::min<std::int64_t>(5, 23 - first);
    bytes.read_rows(DType::kUInt8, first, count, room.data(), static_cast<std::int64_t>(room.size()));
    EXPECT_TRUE(std::equal(room.begin(), room.begin() + count * 7, rows.begin() + first * 7)) << first;
    EXPECT_NE(std::vector<std::uint8_t>(room.begin() + 35, room.end()), std::vector<std::uint8_t>(4, 0xAA)) << first;
  }
  EXPECT_EQ(bytes.raw_chunk_reads(), 10);
  fs::remove(path);
}

TEST(H5Dataset, RawChunkReadNamesTheRowsWhoseChecksumFails) {
  const std::string path = temp_path("raw-flipped.h5");
  write_with_a_flipped_byte(path, 16);  // four chunks, one of them damaged
  const H5File file = H5File::open_read(path, ExitCode::kData);
  const H5Dataset set = file.open_dataset("bytes", 0);
  // In place (room for the stored chunk) or through io's buffer, the damaged chunk is found.
  std::vector<std::uint8_t> out(16 * 1024 + 4);
  int failures = 0;
  for (std::int64_t first = 0; first < 128; first += 16) {
    try {
      const bool in_place = first >= 64;
      set.read_rows(DType::kUInt8, first % 64, 16, out.data(), in_place ? static_cast<std::int64_t>(out.size()) : 0);
    } catch (const Error& e) {
      ++failures;
      EXPECT_EQ(e.code(), ExitCode::kData);
      const std::string message = e.what();
      EXPECT_NE(message.find(path + ": dataset 'bytes': rows " + std::to_string(first % 64) + "-" +
                             std::to_string(first % 64 + 15) + " fail their fletcher32 checksum"),
                std::string::npos)
          << message;
    }
  }
  EXPECT_EQ(failures, 2);
  EXPECT_EQ(set.raw_chunk_reads(), 6);
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
