#include "hpctrain/io/tfrecord.h"

#include <boost/crc.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "hpctrain/core/error.h"

namespace hpctrain::io {
namespace {

constexpr std::uint32_t kMaskDelta = 0xa282ead8U;
constexpr std::size_t kHeaderBytes = 12;  // length, its CRC
constexpr std::size_t kFooterBytes = 4;   // the data's CRC

void put_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::uint64_t get_le(const char* in, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= std::uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return value;
}

}  // namespace

std::uint32_t masked_crc32c(const void* data, std::size_t size) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;  // CRC-32C
  crc.process_bytes(data, size);
  const std::uint32_t sum = crc.checksum();
  return ((sum >> 15) | (sum << 17)) + kMaskDelta;
}

TfRecordWriter::TfRecordWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "wbx");  // x: never over an existing file
  if (file_ == nullptr) throw Error("cannot create " + path + ": " + std::strerror(errno));
}

TfRecordWriter::~TfRecordWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TfRecordWriter::write(const std::string& record) {
  std::string framed;
  framed.reserve(kHeaderBytes + record.size() + kFooterBytes);
  put_le(framed, record.size(), 8);
  put_le(framed, masked_crc32c(framed.data(), 8), 4);
  framed += record;
  put_le(framed, masked_crc32c(record.data(), record.size()), 4);
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size() || std::fflush(file_) != 0) {
    throw Error("cannot write " + path_ + ": " + std::strerror(errno));
  }
}

TfRecordFile read_tfrecords(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  const std::uint64_t size = std::filesystem::file_size(path);
  TfRecordFile file;
  char header[kHeaderBytes];
  char footer[kFooterBytes];
  while (file.valid_bytes < size) {
    const std::uint64_t left = size - file.valid_bytes;
    if (left < kHeaderBytes || !in.read(header, kHeaderBytes) ||
        get_le(header + 8, 4) != masked_crc32c(header, 8)) {
      file.complete = false;
      break;
    }
    const std::uint64_t length = get_le(header, 8);
    if (length > left - kHeaderBytes || left - kHeaderBytes - length < kFooterBytes) {  // checked before allocating
      file.complete = false;
      break;
    }
    std::string data(length, '\0');
    if (!in.read(data.data(), static_cast<std::streamsize>(length)) || !in.read(footer, kFooterBytes) ||
        get_le(footer, 4) != masked_crc32c(data.data(), data.size())) {
      file.complete = false;
      break;
    }
    file.records.push_back({file.valid_bytes, std::move(data)});
    file.valid_bytes += kHeaderBytes + length + kFooterBytes;
  }
  return file;
}

}  // namespace hpctrain::io
