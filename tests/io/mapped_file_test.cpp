// io::MappedFile, and the stored chunks of a dataset read through it (data.io=mmap).
#include "hpctrain/io/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "hpctrain/io/h5_file.h"

namespace hpctrain::io {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("hpctrain_map_" + std::to_string(::getpid()) + "_" + name)).string();
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(MappedFile, HoldsTheFilesBytesAndSurvivesAMove) {
  const std::string path = temp_path("bytes.bin");
  std::vector<char> bytes(10000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 31);
  write_bytes(path, bytes);
  MappedFile first = MappedFile::map(path, ExitCode::kData);
  ASSERT_EQ(first.size(), 10000);
  const MappedFile moved = std::move(first);
  EXPECT_EQ(first.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), reinterpret_cast<const char*>(moved.data())));

  write_bytes(path, {});
  const MappedFile empty = MappedFile::map(path, ExitCode::kData);
  EXPECT_EQ(empty.size(), 0);
  EXPECT_EQ(empty.data(), nullptr);
  fs::remove(path);

  try {
    MappedFile::map(path, ExitCode::kCheckpoint);
    FAIL() << "mapped a file that is not there";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kCheckpoint);
    EXPECT_NE(std::string(e.what()).find(path + ": cannot open to map it"), std::string::npos) << e.what();
  }
}

// Note [Shrunk mappings]: a page read past the end of a file cut short after it was mapped ends
// the process with one line naming the file and the data error's exit code, not a bare SIGBUS.
// Mapped, moved (as Split keeps it), then cut short: the page read is gone.
TEST(MappedFile, AFileCutShortWhileMappedEndsTheProcessNamingIt) {
  const std::string saved_style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The threadsafe style runs this test again in a new process of this program, up to the
  // statement, which then dies: the new process takes the file's name (with this process's id,
  // which keeps concurrent test runs apart) from the environment, so no file is left behind.
  const char* inherited = std::getenv("HPCTRAIN_TEST_SHRINKING_FILE");
  const std::string path = inherited != nullptr ? inherited : temp_path("shrinks.bin");
  ::setenv("HPCTRAIN_TEST_SHRINKING_FILE", path.c_str(), 1);
  write_bytes(path, std::vector<char>(3 * 4096, 'x'));
  EXPECT_EXIT(
      {
        MappedFile first = MappedFile::map(path, ExitCode::kCheckpoint);
        const MappedFile mapped = std::move(first);
        fs::resize_file(path, 100);
        volatile std::uint8_t last = mapped.data()[mapped.size() - 1];
        (void)last;
      },
      ::testing::ExitedWithCode(4),
      "hpctrain: error: .*shrinks.bin: a page of this file, read through a mapping, is gone \\(the file was cut short");
  fs::remove(path);
  ::unsetenv("HPCTRAIN_TEST_SHRINKING_FILE");
  GTEST_FLAG_SET(death_test_style, saved_style);
}

// A SIGBUS that is no read of a mapping (here one sent to the process) is not taken for one: the
// handler in place before decides, the default one here, which ends the process by the signal.
TEST(MappedFile, ABusErrorOfNoMappingIsLeftToTheHandlerBefore) {
  const std::string saved_style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const std::string path = temp_path("listed.bin");
        write_bytes(path, std::vector<char>(4096, 'x'));
        const MappedFile mapped = MappedFile::map(path, ExitCode::kData);  // installs the handler
        fs::remove(path);
        ::raise(SIGBUS);
      },
      ::testing::KilledBySignal(SIGBUS), "");
  GTEST_FLAG_SET(death_test_style, saved_style);
}

// Every stored chunk is where raw_chunk_offsets() says: its bytes are the rows read_rows gives,
// and check_raw_chunk accepts it; a flipped byte in one is named by its rows.
TEST(MappedFile, RawChunkOffsetsPointAtTheStoredChunks) {
  const std::string path = temp_path("chunks.h5");
  std::vector<std::uint8_t> rows(23 * 7);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::uint8_t>(i * 37 + 1);
  {
    H5File file = H5File::create(path, ExitCode::kData);
    WriteOptions options;
    options.chunk_rows = 5;
    file.write("bytes", DType::kUInt8, {23, 7}, rows.data(), options);
    options.deflate_level = 1;
    file.write("deflated", DType::kUInt8, {23, 7}, rows.data(), options);
    file.close();
  }
  {
    const H5File file = H5File::open_read(path, ExitCode::kData);
    const H5Dataset bytes = file.open_dataset("bytes", 0);
    const std::vector<std::int64_t> offsets = bytes.raw_chunk_offsets();
    ASSERT_EQ(offsets.size(), 5U);  // 23 rows in chunks of 5, the last one partial
    const MappedFile mapped = MappedFile::map(path, ExitCode::kData);
    for (std::int64_t k = 0; k < 5; ++k) {
      const std::int64_t at = offsets[static_cast<size_t>(k)];
      ASSERT_GE(at, 0);
      ASSERT_LE(at + bytes.raw_chunk_bytes(), mapped.size());
      const std::int64_t count = std::min<std::int64_t>(5, 23 - 5 * k);
      EXPECT_TRUE(std::equal(rows.begin() + 35 * k, rows.begin() + 35 * k + 7 * count, mapped.data() + at)) << k;
      EXPECT_NO_THROW(bytes.check_raw_chunk(mapped.data() + at, 5 * k, count));
    }
    std::string why;
    EXPECT_TRUE(file.open_dataset("deflated", 0).raw_chunk_offsets(&why).empty());
    EXPECT_NE(why.find("not stored as rows with a checksum alone"), std::string::npos) << why;

    // The same chunk with one byte changed, as a damaged file would hold it.
    std::vector<std::uint8_t> damaged(mapped.data() + offsets[2], mapped.data() + offsets[2] + bytes.raw_chunk_bytes());
    damaged[3] ^= 0x40;
    try {
      bytes.check_raw_chunk(damaged.data(), 10, 5);
      FAIL() << "a damaged chunk passed its checksum";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kData);
      EXPECT_NE(std::string(e.what()).find(path + ": dataset 'bytes': rows 10-14 fail their fletcher32 checksum"),
                std::string::npos)
          << e.what();
    }
  }
  fs::remove(path);
}

}  // namespace
}  // namespace hpctrain::io
