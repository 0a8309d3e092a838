// RAII access to one HDF5 file through the C API: typed datasets (whole or a range of rows),
// string and integer attributes, groups. Safe to call from several threads: every call holds one
// process-wide lock, since Debian's parallel HDF5 is not built thread-safe (Note [One HDF5 caller
// at a time]). Only io/*.cpp includes hdf5.h; callers see plain types.
// Errors are hpctrain::Error with the caller's exit code (data: 3, checkpoint: 4) and HDF5's
// innermost message. Depends on core only.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/core/error.h"

namespace hpctrain::io {

enum class DType { kUInt8, kUInt16, kUInt32, kInt32, kInt64, kFloat32, kFloat64 };

const char* dtype_name(DType dtype);
// "[60000,1,28,28]"; "[]" for a scalar.
std::string shape_text(const std::vector<std::int64_t>& shape);
size_t dtype_size(DType dtype);
// Throws Error(code) for an unknown name.
DType dtype_from_name(const std::string& name, ExitCode code);

struct DatasetInfo {
  DType dtype;
  std::vector<std::int64_t> shape;
};

struct WriteOptions {
  std::int64_t chunk_rows = 0;  // rows (first-dimension entries) per chunk; 0: contiguous layout
  bool fletcher32 = true;       // per-chunk checksums (chunked datasets only)
  int deflate_level = 0;        // 0: no compression
};

// An open dataset with its own chunk cache, for repeated reads of rows (the data loader). Keeping
// it open is what lets the cache serve the next read; opening per read starts cold every time.
class H5Dataset {
 public:
  H5Dataset(H5Dataset&& other) noexcept;
  H5Dataset& operator=(H5Dataset&& other) noexcept;
  H5Dataset(const H5Dataset&) = delete;
  H5Dataset& operator=(const H5Dataset&) = delete;
  ~H5Dataset();

  const DatasetInfo& info() const { return info_; }
  // Reads rows [first, first + count) of the first dimension, converting to `dtype`. Rows that
  // are exactly one chunk, stored with a checksum and nothing else, are read raw and checked here
  // (Note [Raw chunk reads]): straight into `out` when `out_bytes` (the room at `out`) is at least
  // raw_chunk_bytes(), else through a buffer of the calling thread and copied.
  void read_rows(DType dtype, std::int64_t first, std::int64_t count, void* out, std::int64_t out_bytes = 0) const;
  // The stored size of one chunk read raw: its rows and a 4-byte checksum; 0 when chunks are not
  // read raw.
  std::int64_t raw_chunk_bytes() const { return chunk_rows_ > 0 ? chunk_bytes_ + kChecksumBytes : 0; }
  // Rows per chunk read raw; 0 when chunks are not read raw.
  std::int64_t raw_chunk_rows() const { return chunk_rows_; }
  // How many of the reads so far took the raw chunk path.
  std::int64_t raw_chunk_reads() const { return raw_chunk_reads_.load(); }
  // Where in the file each chunk read raw is stored, as raw_chunk_bytes() bytes (data, then
  // checksum), for reading the file without HDF5 (io::MappedFile): the byte offset of chunk k
  // (rows from k * raw_chunk_rows()). Empty, and `why_not` (when given) says why, when a chunk is
  // not so stored (unwritten, a filter skipped), chunks are not read raw, the file has a user
  // block (HDF5 versions disagree on whether chunk addresses count it), or this HDF5 cannot say
  // (before 1.10.5).
  std::vector<std::int64_t> raw_chunk_offsets(std::string* why_not = nullptr) const;
  // Checks a stored chunk (raw_chunk_bytes() at `stored`) holding rows [first, first + count):
  // throws Error naming the rows and the file when its checksum fails.
  void check_raw_chunk(const void* stored, std::int64_t first, std::int64_t count) const;

 private:
  friend class H5File;
  H5Dataset(std::int64_t id, std::string where, ExitCode code, DatasetInfo info);
  bool read_chunk_raw(std::int64_t first, std::int64_t count, void* out, std::int64_t out_bytes) const;
  static constexpr std::int64_t kChecksumBytes = 4;  // fletcher32's, after a chunk's data

  std::int64_t id_ = -1;  // hid_t
  std::string where_;     // "file: dataset" for messages
  ExitCode code_ = ExitCode::kData;
  DatasetInfo info_;
  std::int64_t chunk_rows_ = 0;   // rows per chunk when chunks can be read raw, else 0
  std::int64_t chunk_bytes_ = 0;  // one chunk's data, without its checksum
  mutable std::atomic<std::int64_t> raw_chunk_reads_{0};
};

class H5File {
 public:
  // Creates (truncating) or opens read-only; errors carry `code`.
  static H5File create(const std::string& path, ExitCode code);
  static H5File open_read(const std::string& path, ExitCode code);
  // Opens an existing file to read and write.
  static H5File open_write(const std::string& path, ExitCode code);

  H5File(H5File&& other) noexcept;
  H5File& operator=(H5File&& other) noexcept;
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;
  ~H5File();

  const std::string& path() const { return path_; }

  // Creates every missing group on the way to `name` ("a/b/c" creates a and a/b).
  void write(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape,
             const void* data, const WriteOptions& options = {});
  // Creates dataset `name` (and missing groups) without writing it: its elements read as 0 until
  // written with write_range.
  void create(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape,
              const WriteOptions& options = {});
  // Writes `count` elements of `dtype` from `data` to elements [offset, offset + count) of dataset
  // `name`, counted row-major over its whole shape (a 0-d dataset: offset 0, count 1).
  void write_range(const std::string& name, DType dtype, std::int64_t offset, std::int64_t count, const void* data);
  // Reads elements [offset, offset + count), as write_range counts them, converting to `dtype`.
  // A range beyond the dataset is an error, checked before anything is read.
  void read_range(const std::string& name, DType dtype, std::int64_t offset, std::int64_t count, void* out) const;
  bool exists(const std::string& name) const;
  DatasetInfo info(const std::string& name) const;
  // Reads the whole dataset into `out` (info(name) tells the size), converting to `dtype`.
  void read(const std::string& name, DType dtype, void* out) const;
  // Reads rows [first, first + count) of the first dimension.
  void read_rows(const std::string& name, DType dtype, std::int64_t first, std::int64_t count,
                 void* out) const;
  // Opens `name` for repeated row reads with a chunk cache of up to `cache_bytes` (at least 1 MiB;
  // 0: none, every read goes to the file).
  H5Dataset open_dataset(const std::string& name, std::int64_t cache_bytes) const;
  // Names of the datasets under `group`, recursively, as paths relative to it, in name order.
  std::vector<std::string> list_datasets(const std::string& group) const;

  // Attributes of the root group.
  void set_attr(const std::string& name, const std::string& value);
  void set_attr(const std::string& name, std::int64_t value);
  std::string attr_string(const std::string& name) const;
  std::int64_t attr_int(const std::string& name) const;
  bool has_attr(const std::string& name) const;

  // Flushes and closes; further use throws. Errors on close are reported (the destructor swallows).
  void close();

 private:
  H5File(std::int64_t id, std::string path, ExitCode code);
  [[noreturn]] void fail(const std::string& what) const;

  std::int64_t id_ = -1;  // hid_t
  std::string path_;
  ExitCode code_ = ExitCode::kData;
};

// "1.10.8", and whether this HDF5 was built with MPI-IO (parallel).
std::string hdf5_version();
bool hdf5_is_parallel();

}  // namespace hpctrain::io
