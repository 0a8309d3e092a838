#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

#include "fuzz_target.h"
#include "hpctrain/core/system.h"
#include "hpctrain/io/open_objects.h"

namespace hpctrain::fuzz {

namespace fs = std::filesystem;

namespace {

struct ScratchDir {
  std::string path;
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    const fs::path base = tmp ? fs::path(tmp) : fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    path = (base / ("hpctrain-fuzz-" + std::to_string(::getpid()))).string();
    fs::create_directories(path);
  }
  ~ScratchDir() {
    try {
      hpctrain::sys::remove_tree(path);
    } catch (const std::exception&) {
      // A scratch directory left in /tmp is harmless.
    }
  }
};

}  // namespace

const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw std::runtime_error("fuzz: cannot write " + path);
}

void write_file(const std::string& path, const std::string& text) {
  write_file(path, reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void silence_logs() { spdlog::set_level(spdlog::level::off); }

namespace {
Outcome recorded = Outcome::kRefused;
}  // namespace

void record(Outcome outcome) { recorded = outcome; }

Outcome last_outcome() { return recorded; }

void expect_no_open_hdf5_objects() {
  const std::int64_t open = io::open_hdf5_objects();
  if (open != 0) throw std::logic_error(std::to_string(open) + " HDF5 object(s) left open after the input");
}

}  // namespace hpctrain::fuzz
