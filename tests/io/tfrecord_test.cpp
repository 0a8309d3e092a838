// io/tfrecord.h: the CRC is CRC-32C (its check value), masked as TensorFlow masks it; records read
// back as written; a file cut short, or with a damaged byte, reads up to the last whole record.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "hpctrain/io/tfrecord.h"

namespace hpctrain::io {
namespace {

std::string temp_path(const std::string& name) {
  const std::string path = (std::filesystem::temp_directory_path() / ("hpctrain-tfrecord-" + name)).string();
  std::filesystem::remove(path);
  return path;
}

TEST(TfRecord, TheCrcIsCrc32cMasked) {
  const std::uint32_t crc = 0xe3069283U;  // CRC-32C of "123456789", its standard check value
  EXPECT_EQ(masked_crc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8U);
}

TEST(TfRecord, RecordsReadBackAsWrittenAndADamagedTailIsCutOff) {
  const std::string path = temp_path("records");
  {
    TfRecordWriter writer(path);
    writer.write("first");
    writer.write(std::string(1000, 'x'));
    writer.write("");
  }
  TfRecordFile file = read_tfrecords(path);
  ASSERT_EQ(file.records.size(), 3u);
  EXPECT_TRUE(file.complete);
  EXPECT_EQ(file.records[0].data, "first");
  EXPECT_EQ(file.records[1].offset, 16u + 5u);
  EXPECT_EQ(file.records[1].data, std::string(1000, 'x'));
  EXPECT_EQ(file.valid_bytes, std::filesystem::file_size(path));
  EXPECT_THROW(TfRecordWriter{path}, std::exception) << "an existing file was overwritten";

  std::filesystem::resize_file(path, file.valid_bytes - 3);  // the last record cut short
  file = read_tfrecords(path);
  EXPECT_EQ(file.records.size(), 2u);
  EXPECT_FALSE(file.complete);
  {
    std::fstream damage(path, std::ios::in | std::ios::out | std::ios::binary);
    damage.seekp(16 + 5 + 12 + 500);
    damage.put('y');
  }
  file = read_tfrecords(path);
  EXPECT_EQ(file.records.size(), 1u);
  EXPECT_EQ(file.valid_bytes, 16u + 5u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace hpctrain::io
