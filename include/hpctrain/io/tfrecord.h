// TFRecord framing, the container of TensorBoard's event files: each record is
//   uint64 length, uint32 masked CRC-32C of those 8 bytes, `length` bytes, uint32 masked CRC-32C
//   of them,
// little-endian, where a masked CRC is ((crc >> 15) | (crc << 17)) + 0xa282ead8. The CRC-32C
// (Castagnoli) is Boost.CRC's. Depends on core.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace hpctrain::io {

std::uint32_t masked_crc32c(const void* data, std::size_t size);

// Appends records to a file, each written through to the file at once (fflush).
class TfRecordWriter {
 public:
  // Creates `path` (an existing file is refused: each run start writes its own). Throws Error.
  explicit TfRecordWriter(const std::string& path);
  ~TfRecordWriter();
  TfRecordWriter(const TfRecordWriter&) = delete;
  TfRecordWriter& operator=(const TfRecordWriter&) = delete;

  void write(const std::string& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// One record of a file and where it starts.
struct TfRecord {
  std::uint64_t offset = 0;
  std::string data;
};

// The records of `path`, in order, each length checked against the file before it is read and
// each CRC checked. The first record cut short (a writer killed mid-write) or with a CRC that
// does not match ends the list: `complete` is false and `valid_bytes` is where that record
// begins. Throws Error for a file that cannot be opened.
struct TfRecordFile {
  std::vector<TfRecord> records;
  std::uint64_t valid_bytes = 0;
  bool complete = true;
};
TfRecordFile read_tfrecords(const std::string& path);

}  // namespace hpctrain::io
