#include "hpctrain/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

namespace hpctrain::io {
namespace {

// Note [Shrunk mappings]: a read of a mapped page past the end of a file that shrank after it was
// mapped raises SIGBUS, which would end the rank with a bare "Bus error". Every mapping is listed
// here, so the handler can name the file in one line and exit with the data error's code (the
// launcher then ends the other ranks, as for any rank that exits early). The handler only reads
// the list; a slot is filled before its start is published and emptied before it is unmapped.
struct Mapping {
  std::atomic<const std::uint8_t*> begin{nullptr};
  std::int64_t size = 0;
  const char* path = nullptr;
};
constexpr size_t kMappings = 8192;  // shard files mapped at once; more are mapped unlisted
Mapping g_mappings[kMappings];
std::mutex g_mappings_mutex;

void write_text(const char* text) {
  size_t length = 0;
  while (text[length] != '\0') ++length;
  while (length > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, length);
    if (n <= 0) return;
    text += n;
    length -= static_cast<size_t>(n);
  }
}

void on_bus_error(int signal, siginfo_t* info, void*) {
  const auto* at = static_cast<const std::uint8_t*>(info->si_addr);
  for (const Mapping& mapping : g_mappings) {
    const std::uint8_t* begin = mapping.begin.load(std::memory_order_acquire);
    if (begin != nullptr && at >= begin && at < begin + mapping.size) {
      write_text("hpctrain: error: ");
      write_text(mapping.path);
      write_text(": the file shrank while it was read through a mapping (data.io=mmap): it was changed "
                 "during the run; restore it and resume\n");
      ::_exit(static_cast<int>(ExitCode::kData));
    }
  }
  ::signal(signal, SIG_DFL);  // not one of ours: the default action, as without the handler
  ::raise(signal);
}

void list_mapping(const std::uint8_t* begin, std::int64_t size, const char* path) {
  const std::lock_guard<std::mutex> lock(g_mappings_mutex);
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_sigaction = on_bus_error;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGBUS, &action, nullptr);
    return true;
  }();
  (void)installed;
  for (Mapping& mapping : g_mappings) {
    if (mapping.begin.load(std::memory_order_relaxed) == nullptr) {
      mapping.size = size;
      mapping.path = path;
      mapping.begin.store(begin, std::memory_order_release);
      return;
    }
  }
}

void unlist_mapping(const std::uint8_t* begin) {
  const std::lock_guard<std::mutex> lock(g_mappings_mutex);
  for (Mapping& mapping : g_mappings) {
    if (mapping.begin.load(std::memory_order_relaxed) == begin) {
      mapping.begin.store(nullptr, std::memory_order_release);
      return;
    }
  }
}

}  // namespace

MappedFile MappedFile::map(const std::string& path, ExitCode code) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open to map it: " + std::strerror(errno), code);
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    const int error = errno;
    ::close(fd);
    throw Error(path + ": cannot stat to map it: " + std::strerror(error), code);
  }
  MappedFile mapped;
  mapped.size_ = static_cast<std::int64_t>(status.st_size);
  mapped.path_ = std::make_unique<const std::string>(path);
  if (mapped.size_ > 0) {
    void* data = ::mmap(nullptr, static_cast<size_t>(mapped.size_), PROT_READ, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      throw Error(path + ": cannot map it into memory: " + std::strerror(error), code);
    }
    mapped.data_ = static_cast<const std::uint8_t*>(data);
    list_mapping(mapped.data_, mapped.size_, mapped.path_->c_str());
  }
  ::close(fd);  // the mapping keeps the file open
  return mapped;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(other.data_), size_(other.size_), path_(std::move(other.path_)) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = other.data_;
    size_ = other.size_;
    path_ = std::move(other.path_);
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::unmap() {
  if (data_ != nullptr) {
    unlist_mapping(data_);
    ::munmap(const_cast<std::uint8_t*>(data_), static_cast<size_t>(size_));
  }
  data_ = nullptr;
  size_ = 0;
}

}  // namespace hpctrain::io
