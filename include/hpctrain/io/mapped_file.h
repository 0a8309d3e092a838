// A file mapped read-only into the process (data.io=mmap). Its bytes are the kernel's page cache:
// read without a copy, and shared by every process of a node that maps the same file, so ranks
// hold one copy of a dataset per node instead of one each. A file that shrinks while mapped makes
// a read of the lost pages end the process with one line naming the file and exit code 3 (Note
// [Shrunk mappings] in mapped_file.cpp). Depends on core.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "hpctrain/core/error.h"

namespace hpctrain::io {

class MappedFile {
 public:
  // Throws Error(code) naming the file when it cannot be opened or mapped.
  static MappedFile map(const std::string& path, ExitCode code);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::uint8_t* data() const { return data_; }
  std::int64_t size() const { return size_; }

 private:
  MappedFile() = default;
  void unmap();

  const std::uint8_t* data_ = nullptr;  // nullptr for an empty file
  std::int64_t size_ = 0;
  // On the heap, so the text the SIGBUS handler may print stays where it is when this moves.
  std::unique_ptr<const std::string> path_;
};

}  // namespace hpctrain::io
