// The safetensors format (Hugging Face's weights files): an 8-byte little-endian header length N,
// N bytes of JSON naming each tensor's dtype, shape and byte range, then the tensors' raw
// little-endian bytes. Read through a memory map, every range and shape checked against the file
// before anything is used; written atomically. Depends on core; knows nothing of torch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hpctrain/io/mapped_file.h"

namespace hpctrain::io {

// The dtypes hpctrain reads and writes, by their safetensors names.
enum class StDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

const char* name_of(StDtype dtype);
std::int64_t element_size(StDtype dtype);

struct StTensorInfo {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<std::int64_t> shape;
  std::int64_t begin = 0;  // byte range within the data that follows the header
  std::int64_t end = 0;
};

struct StHeader {
  std::vector<StTensorInfo> tensors;  // in the order of their bytes
  std::map<std::string, std::string> metadata;  // the optional "__metadata__" object
  std::int64_t data_offset = 0;  // where the tensors' bytes start in the file (8 + N)
};

// Parses and checks the header of a file of `size` bytes whose first bytes are `data` (at least
// the 8-byte length and the header itself must be there). Every tensor's range must lie in the
// file, hold exactly its shape's bytes and not overlap another. Throws CheckpointError (exit 4)
// naming `where` and what is wrong.
StHeader parse_safetensors_header(const std::uint8_t* data, std::int64_t size, const std::string& where);

class SafetensorsFile {
 public:
  // Maps the file and parses its header. Throws CheckpointError.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  const StHeader& header() const { return header_; }
  // The first byte of a tensor of header(), in the mapping.
  const std::uint8_t* bytes(const StTensorInfo& tensor) const;

 private:
  SafetensorsFile(std::string path, MappedFile file, StHeader header)
      : path_(std::move(path)), file_(std::move(file)), header_(std::move(header)) {}

  std::string path_;
  MappedFile file_;
  StHeader header_;
};

// A tensor to write: `bytes` must hold exactly shape's elements of dtype, little-endian.
struct StTensorOut {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<std::int64_t> shape;
  const void* bytes = nullptr;
};

// Writes `path` atomically (a temporary file, fsynced, renamed). Throws Error(kUsage) naming the
// file when it cannot be written.
void write_safetensors(const std::string& path, const std::vector<StTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace hpctrain::io
