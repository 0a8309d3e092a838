// A file mapped read-only into the process (data.io=mmap). Its bytes are the kernel's page cache:
// read without a copy, and shared by every process of a node that maps the same file, so ranks
// hold one copy of a dataset per node instead of one each. A read of a page the file lost (cut
// short while mapped) or cannot deliver (an I/O error) ends the process with one line naming the
// file and the exit code given to map() (Note [Shrunk mappings] in mapped_file.cpp). Depends on
// core.
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

  struct Listing;  // what a SIGBUS handler needs to name the file

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
  std::unique_ptr<const Listing> listing_;  // on the heap: it stays put when this moves
};

}  // namespace hpctrain::io
