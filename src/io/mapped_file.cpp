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

// What the SIGBUS handler needs of one mapping; immutable once listed.
struct MappedFile::Listing {
  const std::uint8_t* begin = nullptr;
  std::int64_t size = 0;
  std::string path;
  ExitCode code = ExitCode::kData;
};

namespace {

// Note [Shrunk mappings]: reading a mapped page that the file no longer has (it was cut short
// after it was mapped) or that the file system cannot deliver (an I/O error) raises SIGBUS, which
// would end the rank with a bare "Bus error". Every mapping is listed here, so the handler can
// name the file in one line and exit with the code its owner gave (the launcher, or the other
// ranks' rank watch, then ends the job: a signal handler cannot call MPI_Abort). A SIGBUS outside
// every mapping goes to the handler that was there before (Open MPI's, say): the handler puts it
// back and returns, and the faulting read raises the signal again (one sent by kill is raised
// again). A slot holds a pointer to an
// immutable Listing, published after it is filled and cleared before it is freed.
constexpr size_t kSlots = 8192;  // shard files mapped at once; more are mapped unlisted
std::atomic<const MappedFile::Listing*> g_slots[kSlots];
std::mutex g_slots_mutex;
struct sigaction g_previous_action;

void write_text(const char* text, size_t length) {
  while (length > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, length);
    if (n <= 0) return;
    text += n;
    length -= static_cast<size_t>(n);
  }
}

void write_text(const char* text) { write_text(text, std::strlen(text)); }

void on_bus_error(int, siginfo_t* info, void*) {
  const auto* at = static_cast<const std::uint8_t*>(info->si_addr);
  for (const auto& slot : g_slots) {
    const MappedFile::Listing* listing = slot.load(std::memory_order_acquire);
    if (listing != nullptr && at >= listing->begin && at < listing->begin + listing->size) {
      write_text("hpctrain: error: ");
      write_text(listing->path.data(), listing->path.size());
      write_text(": a page of this file, read through a mapping, is gone (the file was cut short "
                 "while in use) or unreadable (an I/O error); restore it and resume\n");
      ::_exit(static_cast<int>(listing->code));
    }
  }
  sigaction(SIGBUS, &g_previous_action, nullptr);
  if (info->si_code <= 0) ::raise(SIGBUS);  // sent (kill), not a fault: no read raises it again
}

void list_mapping(const MappedFile::Listing* listing) {
  const std::lock_guard<std::mutex> lock(g_slots_mutex);
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_sigaction = on_bus_error;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGBUS, &action, &g_previous_action);
    return true;
  }();
  (void)installed;
  for (auto& slot : g_slots) {
    if (slot.load(std::memory_order_relaxed) == nullptr) {
      slot.store(listing, std::memory_order_release);
      return;
    }
  }
}

void unlist_mapping(const MappedFile::Listing* listing) {
  const std::lock_guard<std::mutex> lock(g_slots_mutex);
  for (auto& slot : g_slots) {
    if (slot.load(std::memory_order_relaxed) == listing) {
      slot.store(nullptr, std::memory_order_release);
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
  if (mapped.size_ > 0) {
    void* data = ::mmap(nullptr, static_cast<size_t>(mapped.size_), PROT_READ, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      throw Error(path + ": cannot map it into memory: " + std::strerror(error), code);
    }
    mapped.data_ = static_cast<const std::uint8_t*>(data);
    mapped.listing_ = std::make_unique<const Listing>(Listing{mapped.data_, mapped.size_, path, code});
    list_mapping(mapped.listing_.get());
  }
  ::close(fd);  // the mapping keeps the file open
  return mapped;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(other.data_), size_(other.size_), listing_(std::move(other.listing_)) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = other.data_;
    size_ = other.size_;
    listing_ = std::move(other.listing_);
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::unmap() {
  if (data_ != nullptr) {
    unlist_mapping(listing_.get());
    ::munmap(const_cast<std::uint8_t*>(data_), static_cast<size_t>(size_));
  }
  listing_.reset();
  data_ = nullptr;
  size_ = 0;
}

}  // namespace hpctrain::io
