#include "hpctrain/io/h5_file.h"

#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "hdf5_handles.h"
#include "hpctrain/io/fletcher32.h"
#include "hpctrain/io/open_objects.h"

namespace hpctrain::io {
namespace {

// HDF5 prints its error stack to stderr by default; we turn it off and report the innermost
// message in our own one-line error instead.
void silence_hdf5() {
  static const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

// HDF5's outermost words, and the system's where a file driver failed beneath them: its entry
// reads "... errno = 28, error message = 'No space left on device', ...".
std::string hdf5_message() {
  struct Found {
    std::string outer;
    std::string system;
  } found;
  auto walk = [](unsigned n, const H5E_error2_t* err, void* data) -> herr_t {
    auto* out = static_cast<Found*>(data);
    if (err->desc == nullptr) return 0;
    const std::string desc = err->desc;
    if (n == 0) out->outer = desc;
    const std::string key = "error message = '";
    const size_t start = desc.find(key);
    if (start != std::string::npos) {
      const size_t end = desc.find('\'', start + key.size());
      if (end != std::string::npos) out->system = desc.substr(start + key.size(), end - start - key.size());
    }
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk, &found);
  H5Eclear2(H5E_DEFAULT);
  const std::string message = found.outer.empty() ? "HDF5 call failed" : found.outer;
  return found.system.empty() ? message : message + " (" + found.system + ")";
}

std::vector<hsize_t> to_hsize(const std::vector<std::int64_t>& shape) {
  return std::vector<hsize_t>(shape.begin(), shape.end());
}

}  // namespace

std::recursive_mutex& library_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

// Note [Layouts read safely]: HDF5 1.10 trusts a dataset's layout message. In damaged files whose
// chunk size had grown larger than the dataset while the stored chunks had not, it copied a whole
// chunk's worth out of a smaller buffer: a heap over-read inside the library that fuzz_shard and
// fuzz_checkpoint found. Chunks larger than the data are legal HDF5, but hpctrain never writes
// them (io::WriteOptions: chunks no larger than their dataset, or contiguous datasets), so a
// guard refuses every layout it does not write before a read.
void check_layout(hid_t set, const std::string& where, ExitCode code) {
  const Handle dcpl(H5Dget_create_plist(set));
  const Handle space(H5Dget_space(set));
  const int rank = space.ok() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  const H5D_layout_t layout = dcpl.ok() ? H5Pget_layout(dcpl.get()) : H5D_LAYOUT_ERROR;
  bool sound = rank >= 0 && (layout == H5D_CONTIGUOUS || layout == H5D_CHUNKED);
  if (sound && layout == H5D_CHUNKED) {
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    std::vector<hsize_t> chunk(static_cast<size_t>(rank));
    sound = H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) == rank &&
            H5Pget_chunk(dcpl.get(), rank, chunk.data()) == rank;
    for (size_t d = 0; sound && d < dims.size(); ++d) sound = chunk[d] <= std::max<hsize_t>(dims[d], 1);
  }
  if (!sound) {
    H5Eclear2(H5E_DEFAULT);
    throw Error(where + " is stored in a layout hpctrain never writes (chunks larger than the data, or "
                "compact): the file is damaged",
                code);
  }
}

std::int64_t open_hdf5_objects() {
  const LibraryLock lock;
  return static_cast<std::int64_t>(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kUInt8: return "uint8";
    case DType::kUInt16: return "uint16";
    case DType::kUInt32: return "uint32";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
  }
  return "?";
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kUInt8: return 1;
    case DType::kUInt16: return 2;
    case DType::kUInt32: return 4;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
  }
  return 1;
}

DType dtype_from_name(const std::string& name, ExitCode code) {
  for (DType d : {DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kInt32, DType::kInt64, DType::kFloat32,
                  DType::kFloat64}) {
    if (name == dtype_name(d)) return d;
  }
  throw Error("unknown dtype '" + name + "' (allowed: uint8|uint16|uint32|int32|int64|float32|float64)",
              code);
}

H5File::H5File(std::int64_t id, std::string path, ExitCode code)
    : id_(id), path_(std::move(path)), code_(code) {}

H5File::H5File(H5File&& other) noexcept
    : id_(other.id_), path_(std::move(other.path_)), code_(other.code_) {
  other.id_ = -1;
}

H5File& H5File::operator=(H5File&& other) noexcept {
  const LibraryLock lock;
  if (this != &other) {
    if (id_ >= 0) H5Fclose(id_);
    id_ = other.id_;
    path_ = std::move(other.path_);
    code_ = other.code_;
    other.id_ = -1;
  }
  return *this;
}

H5File::~H5File() {
  const LibraryLock lock;
  if (id_ >= 0) H5Fclose(id_);
}

void H5File::fail(const std::string& what) const {
  const LibraryLock lock;
  throw Error(path_ + ": " + what + ": " + hdf5_message(), code_);
}

H5File H5File::create(const std::string& path, ExitCode code) {
  const LibraryLock lock;
  silence_hdf5();
  // Note [Checksummed metadata]: in HDF5's original file format only our fletcher32 chunks carry
  // checksums; a damaged object header or chunk index reaches the library's parsers, and HDF5 1.10
  // has crashed on such files (a division by zero opening a dataset, found by fuzz_checkpoint).
  // The 1.10 format checksums every piece of metadata (superblock, object headers, chunk indexes),
  // so damage is reported as an error before it is parsed. Both bounds are 1.10, so any HDF5 from
  // 1.10 on reads the files, whichever newer version wrote them. (HDF5 1.10.0 and 1.10.1 name no
  // V110 bound; their LATEST is the 1.10 format.) The 0-d datasets (counters, the loss scale) are
  // stored unchunked, without a checksum of their value: their readers range-check them.
  const Handle access(H5Pcreate(H5P_FILE_ACCESS));
#if H5_VERSION_GE(1, 10, 2)
  const herr_t bounds = H5Pset_libver_bounds(access.get(), H5F_LIBVER_V110, H5F_LIBVER_V110);
#else
  const herr_t bounds = H5Pset_libver_bounds(access.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
#endif
  if (bounds < 0) throw Error(path + ": cannot select HDF5's 1.10 file format: " + hdf5_message(), code);
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get());
  if (id < 0) throw Error(path + ": cannot create HDF5 file: " + hdf5_message(), code);
  return H5File(id, path, code);
}

H5File H5File::open_read(const std::string& path, ExitCode code) {
  const LibraryLock lock;
  silence_hdf5();
  if (!std::filesystem::is_regular_file(path)) throw Error(path + ": no such file", code);
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw Error(path + ": not an HDF5 file (or truncated)", code);
  }
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) throw Error(path + ": cannot open HDF5 file: " + hdf5_message(), code);
  return H5File(id, path, code);
}

H5File H5File::open_write(const std::string& path, ExitCode code) {
  const LibraryLock lock;
  silence_hdf5();
  if (!std::filesystem::is_regular_file(path)) throw Error(path + ": no such file", code);
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (id < 0) throw Error(path + ": cannot open HDF5 file for writing: " + hdf5_message(), code);
  return H5File(id, path, code);
}

void H5File::write(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape,
                   const void* data, const WriteOptions& options) {
  const LibraryLock lock;
  create(name, dtype, shape, options);
  std::int64_t elements = 1;
  for (const std::int64_t d : shape) elements *= d;
  if (!shape.empty() && options.chunk_rows > 0 && elements > 0) {
    write_range(name, dtype, 0, elements, data);  // whole chunks raw (Note [Raw chunk writes])
    return;
  }
  Handle set(H5Dopen2(id_, name.c_str(), H5P_DEFAULT));
  if (!set.ok()) fail("cannot open dataset " + name);
  if (H5Dwrite(set.get(), native_type(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    fail("cannot write dataset " + name);
  }
}

void H5File::create(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape,
                    const WriteOptions& options) {
  const LibraryLock lock;
  const auto dims = to_hsize(shape);
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  if (!space.ok()) fail("cannot describe dataset " + name);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  if (options.chunk_rows > 0 && !shape.empty() && shape[0] > 0) {
    std::vector<hsize_t> chunk = dims;
    chunk[0] = std::min<hsize_t>(dims[0], static_cast<hsize_t>(options.chunk_rows));
    H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    if (options.fletcher32) H5Pset_fletcher32(dcpl.get());
    if (options.deflate_level > 0) H5Pset_deflate(dcpl.get(), static_cast<unsigned>(options.deflate_level));
  }
  Handle set(H5Dcreate2(id_, name.c_str(), native_type(dtype), space.get(), lcpl.get(), dcpl.get(),
                        H5P_DEFAULT));
  if (!set.ok()) fail("cannot create dataset " + name);
}

namespace {

// A box of a dataset: a hyperslab of `count` elements per dimension from `start`.
struct Box {
  std::vector<hsize_t> start;
  std::vector<hsize_t> count;
  hsize_t elements = 0;
};

// The boxes of the elements [lo, hi), counted row-major, of the part of a dataset of `dims` whose
// first `dim` coordinates are `start`'s, in row-major order: a partial first row, whole rows, a
// partial last row, each recursively, so at most two boxes per dimension.
void range_boxes(const std::vector<hsize_t>& dims, std::vector<hsize_t> start, size_t dim, hsize_t lo, hsize_t hi,
                 std::vector<Box>& out) {
  if (lo >= hi) return;
  hsize_t inner = 1;
  for (size_t d = dim + 1; d < dims.size(); ++d) inner *= dims[d];
  if (lo % inner != 0) {  // a partial first row
    const hsize_t row = lo / inner;
    const hsize_t end = std::min(hi, (row + 1) * inner);
    start[dim] = row;
    range_boxes(dims, start, dim + 1, lo - row * inner, end - row * inner, out);
    lo = end;
  }
  if (hi / inner > lo / inner) {  // whole rows
    Box box{start, std::vector<hsize_t>(dims.size(), 1), (hi / inner - lo / inner) * inner};
    box.start[dim] = lo / inner;
    box.count[dim] = hi / inner - lo / inner;
    for (size_t d = dim + 1; d < dims.size(); ++d) box.count[d] = dims[d];
    out.push_back(box);
  }
  if (hi % inner != 0 && hi / inner >= lo / inner && hi > lo) {  // a partial last row
    const hsize_t row = hi / inner;
    start[dim] = row;
    range_boxes(dims, start, dim + 1, 0, hi - row * inner, out);
  }
}

// Reads (or with `write`, writes) elements [offset, offset + count) of the open dataset `set`,
// counted row-major, box by box: each a regular hyperslab, which HDF5 moves in whole runs, where
// one selection of several boxes would go through its slower irregular path. A range beyond the
// dataset is an error naming `where`, raised before anything moves.
void transfer_range(hid_t set, const std::string& where, ExitCode code, DType dtype, std::int64_t offset,
                    std::int64_t count, void* data, bool write) {
  Handle space(H5Dget_space(set));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  hsize_t total = 1;
  for (const hsize_t d : dims) total *= d;
  if (rank < 0 || offset < 0 || count < 0 || static_cast<hsize_t>(offset) + static_cast<hsize_t>(count) > total) {
    throw Error(where + ": elements [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                    ") are outside the dataset of " + std::to_string(total),
                code);
  }
  const auto move = [&](hid_t memory, hid_t file, void* at) {
    return write ? H5Dwrite(set, native_type(dtype), memory, file, H5P_DEFAULT, at)
                 : H5Dread(set, native_type(dtype), memory, file, H5P_DEFAULT, at);
  };
  const auto fail = [&] {
    throw Error(where + (write ? ": cannot write elements: " : ": cannot read elements (corrupted or truncated?): ") +
                    hdf5_message(),
                code);
  };
  if (count == 0) return;
  if (rank == 0) {  // a scalar: its one element
    if (move(H5S_ALL, H5S_ALL, data) < 0) fail();
    return;
  }
  std::vector<Box> boxes;
  range_boxes(dims, std::vector<hsize_t>(dims.size(), 0), 0, static_cast<hsize_t>(offset),
              static_cast<hsize_t>(offset + count), boxes);
  char* at = static_cast<char*>(data);
  for (const Box& box : boxes) {
    H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, box.start.data(), nullptr, box.count.data(), nullptr);
    // The box's own shape in memory too: HDF5 then moves it as one block.
    const Handle memory(H5Screate_simple(rank, box.count.data(), nullptr));
    if (move(memory.get(), space.get(), at) < 0) fail();
    at += box.elements * dtype_size(dtype);
  }
}

// Note [Raw chunk writes]: HDF5's filter pipeline copies each chunk and sums it a byte at a time
// for fletcher32 (about 400 MB/s here), most of a checkpoint write's time. A chunk that a write
// covers whole is written instead as HDF5 would store it, its rows followed by the checksum
// io::fletcher32 computes (several GB/s), with H5Dwrite_chunk; readers, HDF5's own included, cannot
// tell the difference (tests/io/h5_file_test.cpp). Only datasets that raw chunk reads accept
// (raw_readable_chunk_rows: rows, fletcher32 alone, the native type) are written so; edge chunks,
// which HDF5 pads, go through H5Dwrite.
struct ChunkRun {
  std::int64_t first_element = 0;   // of the first whole chunk
  std::int64_t first_row = 0;
  std::int64_t chunks = 0;          // whole chunks in the range; 0: none, or not raw-writable
  std::int64_t chunk_rows = 0;
  std::int64_t chunk_elements = 0;
  std::size_t chunk_bytes = 0;
  int rank = 0;                     // of the dataset
};

std::int64_t raw_readable_chunk_rows(hid_t set, const DatasetInfo& info);

ChunkRun whole_chunks_within(hid_t set, DType dtype, std::int64_t offset, std::int64_t count) {
  ChunkRun run;
#if H5_VERSION_GE(1, 10, 3)
  DatasetInfo info;
  info.dtype = dtype;
  Handle space(H5Dget_space(set));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 1 || offset < 0 || count <= 0) return run;
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  for (const hsize_t d : dims) info.shape.push_back(static_cast<std::int64_t>(d));
  run.chunk_rows = raw_readable_chunk_rows(set, info);
  if (run.chunk_rows <= 0) return run;
  std::int64_t row_elements = 1;
  for (size_t d = 1; d < info.shape.size(); ++d) row_elements *= info.shape[d];
  run.chunk_elements = run.chunk_rows * row_elements;
  if (run.chunk_elements == 0) return run;
  const std::int64_t full_chunks = info.shape[0] / run.chunk_rows;  // the edge chunk, if any, is not
  const std::int64_t first = (offset + run.chunk_elements - 1) / run.chunk_elements;
  const std::int64_t end = std::min((offset + count) / run.chunk_elements, full_chunks);
  if (end <= first || static_cast<hsize_t>(offset + count) > dims[0] * static_cast<hsize_t>(row_elements)) return run;
  run.first_element = first * run.chunk_elements;
  run.first_row = first * run.chunk_rows;
  run.chunks = end - first;
  run.chunk_bytes = static_cast<std::size_t>(run.chunk_elements) * dtype_size(dtype);  // stored as the native type
  run.rank = rank;
#else
  (void)set, (void)dtype, (void)offset, (void)count;
#endif
  return run;
}

void write_chunks_raw(hid_t set, const std::string& where, ExitCode code, const ChunkRun& run, const char* data) {
#if H5_VERSION_GE(1, 10, 3)
  const std::size_t chunk_bytes = run.chunk_bytes;
  std::vector<unsigned char> stored(chunk_bytes + 4);
  std::vector<hsize_t> at(static_cast<std::size_t>(run.rank), 0);
  for (std::int64_t k = 0; k < run.chunks; ++k) {
    std::memcpy(stored.data(), data + static_cast<std::size_t>(k) * chunk_bytes, chunk_bytes);
    const std::uint32_t sum = fletcher32(stored.data(), chunk_bytes);
    // Little-endian, as HDF5 stores it.
    for (size_t b = 0; b < 4; ++b) stored[chunk_bytes + b] = static_cast<unsigned char>(sum >> (8 * b));
    at[0] = static_cast<hsize_t>(run.first_row + k * run.chunk_rows);
    if (H5Dwrite_chunk(set, H5P_DEFAULT, 0, at.data(), stored.size(), stored.data()) < 0) {
      throw Error(where + ": cannot write a chunk: " + hdf5_message(), code);
    }
  }
#else
  (void)set, (void)where, (void)code, (void)run, (void)data;
#endif
}

}  // namespace

void H5File::write_range(const std::string& name, DType dtype, std::int64_t offset, std::int64_t count,
                         const void* data) {
  const LibraryLock lock;
  Handle set(H5Dopen2(id_, name.c_str(), H5P_DEFAULT));
  if (!set.ok()) fail("cannot open dataset " + name);
  const std::string where = path_ + ": dataset '" + name + "'";
  auto* bytes = static_cast<char*>(const_cast<void*>(data));
  const ChunkRun whole = whole_chunks_within(set.get(), dtype, offset, count);
  if (whole.chunks == 0) {
    transfer_range(set.get(), where, code_, dtype, offset, count, bytes, /*write=*/true);
    return;
  }
  // The partial chunks at either end through HDF5 (which merges them with what is stored), the
  // whole ones raw.
  const std::int64_t head = whole.first_element - offset;
  const std::int64_t raw = whole.chunks * whole.chunk_elements;
  const std::size_t element = dtype_size(dtype);
  transfer_range(set.get(), where, code_, dtype, offset, head, bytes, /*write=*/true);
  write_chunks_raw(set.get(), where, code_, whole, bytes + head * element);
  transfer_range(set.get(), where, code_, dtype, whole.first_element + raw, count - head - raw,
                 bytes + (head + raw) * element, /*write=*/true);
}

void H5File::read_range(const std::string& name, DType dtype, std::int64_t offset, std::int64_t count,
                        void* out) const {
  const LibraryLock lock;
  Handle set(H5Dopen2(id_, name.c_str(), H5P_DEFAULT));
  if (!set.ok()) fail("cannot open dataset " + name);
  check_layout(set.get(), path_ + ": dataset '" + name + "'", code_);
  transfer_range(set.get(), path_ + ": dataset '" + name + "'", code_, dtype, offset, count, out, /*write=*/false);
}

bool H5File::exists(const std::string& name) const {
  const LibraryLock lock;
  // H5Lexists needs every parent to exist; check each prefix.
  size_t pos = 0;
  while ((pos = name.find('/', pos + 1)) != std::string::npos) {
    if (H5Lexists(id_, name.substr(0, pos).c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return H5Lexists(id_, name.c_str(), H5P_DEFAULT) > 0;
}

DatasetInfo H5File::info(const std::string& name) const {
  const LibraryLock lock;
  if (!exists(name)) throw Error(path_ + ": dataset '" + name + "' is missing", code_);
  Handle set(H5Dopen2(id_, name.c_str(), H5P_DEFAULT));
  if (!set.ok()) fail("cannot open dataset " + name);
  check_layout(set.get(), path_ + ": dataset '" + name + "'", code_);
  Handle type(H5Dget_type(set.get()));
  Handle space(H5Dget_space(set.get()));
  DatasetInfo out{};
  const H5T_class_t cls = H5Tget_class(type.get());
  const size_t size = H5Tget_size(type.get());
  const bool is_signed = cls == H5T_INTEGER && H5Tget_sign(type.get()) == H5T_SGN_2;
  if (cls == H5T_INTEGER && size == 1 && !is_signed) {
    out.dtype = DType::kUInt8;
  } else if (cls == H5T_INTEGER && size == 2 && !is_signed) {
    out.dtype = DType::kUInt16;
  } else if (cls == H5T_INTEGER && size == 4 && !is_signed) {
    out.dtype = DType::kUInt32;
  } else if (cls == H5T_INTEGER && size == 4 && is_signed) {
    out.dtype = DType::kInt32;
  } else if (cls == H5T_INTEGER && size == 8 && is_signed) {
    out.dtype = DType::kInt64;
  } else if (cls == H5T_FLOAT && size == 4) {
    out.dtype = DType::kFloat32;
  } else if (cls == H5T_FLOAT && size == 8) {
    out.dtype = DType::kFloat64;
  } else {
    throw Error(path_ + ": dataset '" + name + "' has an unsupported element type", code_);
  }
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail("cannot read the shape of " + name);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  out.shape.assign(dims.begin(), dims.end());
  return out;
}

void H5File::read(const std::string& name, DType dtype, void* out) const {
  const LibraryLock lock;
  Handle set(H5Dopen2(id_, name.c_str(), H5P_DEFAULT));
  if (!set.ok()) fail("cannot open dataset " + name);
  check_layout(set.get(), path_ + ": dataset '" + name + "'", code_);
  if (H5Dread(set.get(), native_type(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
    fail("cannot read dataset " + name + " (corrupted or truncated?)");
  }
}

namespace {

// Rows [first, first + count) of the open dataset `set`; errors name `where`.
void read_rows_of(hid_t set, const std::string& where, ExitCode code, DType dtype, std::int64_t first,
                  std::int64_t count, void* out) {
  Handle file_space(H5Dget_space(set));
  const int rank = H5Sget_simple_extent_ndims(file_space.get());
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  H5Sget_simple_extent_dims(file_space.get(), dims.data(), nullptr);
  if (rank < 1 || first < 0 || count < 0 || static_cast<hsize_t>(first + count) > dims[0]) {
    throw Error(where + ": rows [" + std::to_string(first) + ", " + std::to_string(first + count) +
                    ") are outside the dataset",
                code);
  }
  std::vector<hsize_t> start(dims.size(), 0);
  std::vector<hsize_t> extent = dims;
  start[0] = static_cast<hsize_t>(first);
  extent[0] = static_cast<hsize_t>(count);
  H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr);
  Handle memory_space(H5Screate_simple(rank, extent.data(), nullptr));
  if (H5Dread(set, native_type(dtype), memory_space.get(), file_space.get(), H5P_DEFAULT, out) < 0) {
    throw Error(where + ": cannot read rows " + std::to_string(first) + "-" +
                    std::to_string(first + count - 1) + " (corrupted or truncated?): " + hdf5_message(),
                code);
  }
}

}  // namespace

void H5File::read_rows(const std::string& name, DType dtype, std::int64_t first,
                       std::int64_t count, void* out) const {
  const LibraryLock lock;
  Handle set(H5Dopen2(id_, name.c_str(), H5P_DEFAULT));
  if (!set.ok()) fail("cannot open dataset " + name);
  check_layout(set.get(), path_ + ": dataset '" + name + "'", code_);
  read_rows_of(set.get(), path_ + ": dataset '" + name + "'", code_, dtype, first, count, out);
}

namespace {

// Rows per chunk of a dataset whose chunks can be read raw (Note [Raw chunk reads]), else 0: chunked
// along the first dimension only, fletcher32 its one filter, stored in the native type.
std::int64_t raw_readable_chunk_rows(hid_t set, const DatasetInfo& info) {
#if H5_VERSION_GE(1, 10, 3) && !H5_VERSION_GE(2, 0, 0) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  Handle dcpl(H5Dget_create_plist(set));
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED || H5Pget_nfilters(dcpl.get()) != 1) return 0;
  unsigned flags = 0;
  size_t values = 0;
  unsigned config = 0;
  if (H5Pget_filter2(dcpl.get(), 0, &flags, &values, nullptr, 0, nullptr, &config) != H5Z_FILTER_FLETCHER32) {
    return 0;
  }
  Handle type(H5Dget_type(set));
  if (H5Tequal(type.get(), native_type(info.dtype)) <= 0) return 0;
  const int rank = static_cast<int>(info.shape.size());
  std::vector<hsize_t> chunk(info.shape.size());
  if (rank < 1 || H5Pget_chunk(dcpl.get(), rank, chunk.data()) != rank) return 0;
  for (int d = 1; d < rank; ++d) {
    if (static_cast<std::int64_t>(chunk[static_cast<size_t>(d)]) != info.shape[static_cast<size_t>(d)]) return 0;
  }
  return static_cast<std::int64_t>(chunk[0]);
#else  // H5Dread_chunk is new in 1.10.3 and changed its signature in 2.0, and io::fletcher32 reads
       // little-endian words: such builds use H5Dread
  (void)set;
  (void)info;
  return 0;
#endif
}

}  // namespace

H5Dataset H5File::open_dataset(const std::string& name, std::int64_t cache_bytes) const {
  const LibraryLock lock;
  const DatasetInfo dataset_info = info(name);  // checks the layout too
  Handle access(H5Pcreate(H5P_DATASET_ACCESS));
  // Slots: a prime well above the number of chunks the cache can hold (HDF5's advice).
  const std::int64_t bytes = cache_bytes <= 0 ? 0 : std::max<std::int64_t>(cache_bytes, 1 << 20);
  H5Pset_chunk_cache(access.get(), 100003, static_cast<size_t>(bytes), H5D_CHUNK_CACHE_W0_DEFAULT);
  const hid_t id = H5Dopen2(id_, name.c_str(), access.get());
  if (id < 0) fail("cannot open dataset " + name);
  H5Dataset dataset(id, path_ + ": dataset '" + name + "'", code_, dataset_info);
  dataset.chunk_rows_ = raw_readable_chunk_rows(id, dataset_info);
  std::int64_t row_bytes = static_cast<std::int64_t>(dtype_size(dataset_info.dtype));
  for (size_t d = 1; d < dataset_info.shape.size(); ++d) row_bytes *= dataset_info.shape[d];
  dataset.chunk_bytes_ = dataset.chunk_rows_ * row_bytes;
  return dataset;
}

H5Dataset::H5Dataset(std::int64_t id, std::string where, ExitCode code, DatasetInfo info)
    : id_(id), where_(std::move(where)), code_(code), info_(std::move(info)) {}

H5Dataset::H5Dataset(H5Dataset&& other) noexcept
    : id_(other.id_),
      where_(std::move(other.where_)),
      code_(other.code_),
      info_(std::move(other.info_)),
      chunk_rows_(other.chunk_rows_),
      chunk_bytes_(other.chunk_bytes_),
      raw_chunk_reads_(other.raw_chunk_reads_.load()) {
  other.id_ = -1;
  other.chunk_rows_ = 0;
}

H5Dataset& H5Dataset::operator=(H5Dataset&& other) noexcept {
  const LibraryLock lock;
  if (this != &other) {
    if (id_ >= 0) H5Dclose(id_);
    id_ = other.id_;
    where_ = std::move(other.where_);
    code_ = other.code_;
    info_ = std::move(other.info_);
    chunk_rows_ = other.chunk_rows_;
    chunk_bytes_ = other.chunk_bytes_;
    raw_chunk_reads_ = other.raw_chunk_reads_.load();
    other.id_ = -1;
    other.chunk_rows_ = 0;
  }
  return *this;
}

H5Dataset::~H5Dataset() {
  const LibraryLock lock;
  if (id_ >= 0) H5Dclose(id_);
}

void H5Dataset::read_rows(DType dtype, std::int64_t first, std::int64_t count, void* out,
                          std::int64_t out_bytes) const {
  if (dtype == info_.dtype && read_chunk_raw(first, count, out, out_bytes)) return;
  const LibraryLock lock;
  read_rows_of(id_, where_, code_, dtype, first, count, out);
}

// Note [Raw chunk reads]: through H5Dread, HDF5 reads a chunk into a buffer of its own, checks its
// fletcher32 a word at a time and copies the rows out: about 2 GB/s on a core that reads the page
// cache at 10 GB/s (docs/benchmarks.md), so the loader's reads from the files fell far short of a
// raw read. A read of exactly one chunk whose only filter is the checksum is instead read as the
// stored bytes (H5Dread_chunk) into a buffer of the calling thread, then, outside io's lock (so
// loader threads check chunks in parallel), checked with io::fletcher32 (the same value, several
// times faster) and copied out. Where the caller has room for the stored chunk, it is read
// straight into the caller's memory, checksum included, and nothing is copied: the data loader's
// blocks are allocated so (a copy of fresh memory cost as much as the read and the checksum
// together). Compression, a type conversion, rows across chunks, or a chunk HDF5 stored
// unfiltered all take H5Dread, as does any build without H5Dread_chunk.
bool H5Dataset::read_chunk_raw(std::int64_t first, std::int64_t count, void* out, std::int64_t out_bytes) const {
#if H5_VERSION_GE(1, 10, 3) && !H5_VERSION_GE(2, 0, 0)
  if (chunk_rows_ == 0 || count <= 0 || first % chunk_rows_ != 0 ||
      count != std::min(chunk_rows_, info_.shape[0] - first)) {
    return false;
  }
  thread_local std::vector<unsigned char> buffer;  // one chunk per reading thread, reused
  unsigned char* chunk = nullptr;
  {
    const LibraryLock lock;
    std::vector<hsize_t> offset(info_.shape.size(), 0);
    offset[0] = static_cast<hsize_t>(first);
    hsize_t stored_bytes = 0;
    if (H5Dget_chunk_storage_size(id_, offset.data(), &stored_bytes) < 0 ||
        static_cast<std::int64_t>(stored_bytes) != chunk_bytes_ + kChecksumBytes) {
      H5Eclear2(H5E_DEFAULT);
      return false;  // not allocated, or not as expected: H5Dread decides
    }
    if (out_bytes >= static_cast<std::int64_t>(stored_bytes)) {
      chunk = static_cast<unsigned char*>(out);
    } else {
      buffer.resize(static_cast<size_t>(stored_bytes));
      chunk = buffer.data();
    }
    std::uint32_t skipped_filters = 0;
    if (H5Dread_chunk(id_, H5P_DEFAULT, offset.data(), &skipped_filters, chunk) < 0) {
      throw Error(where_ + ": cannot read rows " + std::to_string(first) + "-" + std::to_string(first + count - 1) +
                      " (corrupted or truncated?): " + hdf5_message(),
                  code_);
    }
    if (skipped_filters != 0) return false;
  }
  check_raw_chunk(chunk, first, count);
  if (chunk != out) std::memcpy(out, chunk, static_cast<size_t>(count * (chunk_bytes_ / chunk_rows_)));
  ++raw_chunk_reads_;
  return true;
#else
  (void)first;
  (void)count;
  (void)out;
  (void)out_bytes;
  return false;
#endif
}

void H5Dataset::check_raw_chunk(const void* stored, std::int64_t first, std::int64_t count) const {
  const auto* sum = static_cast<const unsigned char*>(stored) + chunk_bytes_;
  const std::uint32_t stored_sum = static_cast<std::uint32_t>(sum[0]) | static_cast<std::uint32_t>(sum[1]) << 8 |
                                   static_cast<std::uint32_t>(sum[2]) << 16 | static_cast<std::uint32_t>(sum[3]) << 24;
  if (!fletcher32_matches(stored_sum, fletcher32(stored, static_cast<size_t>(chunk_bytes_)))) {
    throw Error(where_ + ": rows " + std::to_string(first) + "-" + std::to_string(first + count - 1) +
                    " fail their fletcher32 checksum: the file is corrupted; restore or re-create it",
                code_);
  }
}

std::vector<std::int64_t> H5Dataset::raw_chunk_offsets(std::string* why_not) const {
  std::string unused;
  std::string& why = why_not != nullptr ? *why_not : unused;
  if (chunk_rows_ == 0) {
    why = "its chunks are not stored as rows with a checksum alone (compressed, another type or "
          "chunked across rows), or this HDF5 does not read chunks raw";
    return {};
  }
#if H5_VERSION_GE(1, 10, 5) && !H5_VERSION_GE(2, 0, 0)
  const LibraryLock lock;
  const Handle file(H5Iget_file_id(id_));
  const Handle fcpl(H5Fget_create_plist(file.get()));
  hsize_t user_block = 0;
  const Handle space(H5Dget_space(id_));
  hsize_t stored_chunks = 0;
  if (!fcpl.ok() || H5Pget_userblock(fcpl.get(), &user_block) < 0 ||
      H5Dget_num_chunks(id_, space.get(), &stored_chunks) < 0) {
    why = "HDF5 cannot list its chunks: " + hdf5_message();
    return {};
  }
  // HDF5 1.14.4 began to count a user block in the addresses it gives; hpctrain writes none.
  if (user_block != 0) {
    why = "the file starts with a user block of " + std::to_string(user_block) + " bytes";
    return {};
  }
  // Each call takes time that grows with the chunk count in HDF5 1.10 (10,000 chunks 3.3 s, 50,000
  // chunks 97 s, H5Dget_chunk_info_by_coord alike); H5Dchunk_iter, one pass, arrived in 1.14.
  std::vector<std::int64_t> offsets(static_cast<size_t>((info_.shape[0] + chunk_rows_ - 1) / chunk_rows_), -1);
  std::vector<hsize_t> coordinates(info_.shape.size());
  for (hsize_t index = 0; index < stored_chunks; ++index) {
    unsigned skipped_filters = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t bytes = 0;
    if (H5Dget_chunk_info(id_, space.get(), index, coordinates.data(), &skipped_filters, &address, &bytes) < 0) {
      why = "HDF5 cannot say where chunk " + std::to_string(index) + " is: " + hdf5_message();
      return {};
    }
    const auto chunk = static_cast<size_t>(coordinates[0] / static_cast<hsize_t>(chunk_rows_));
    if (chunk < offsets.size() && skipped_filters == 0 && address != HADDR_UNDEF &&
        static_cast<std::int64_t>(bytes) == raw_chunk_bytes()) {
      offsets[chunk] = static_cast<std::int64_t>(address);
    }
  }
  for (size_t chunk = 0; chunk < offsets.size(); ++chunk) {
    if (offsets[chunk] < 0) {
      const std::int64_t first = static_cast<std::int64_t>(chunk) * chunk_rows_;
      why = "the chunk of rows " + std::to_string(first) + "-" +
            std::to_string(std::min(first + chunk_rows_, info_.shape[0]) - 1) +
            " is not stored whole with its checksum";
      return {};
    }
  }
  return offsets;
#else
  why = "this HDF5 (" + std::to_string(H5_VERS_MAJOR) + "." + std::to_string(H5_VERS_MINOR) + "." +
        std::to_string(H5_VERS_RELEASE) + ") cannot say where chunks are stored (1.10.5 to 1.14 can)";
  return {};
#endif
}

std::vector<std::string> H5File::list_datasets(const std::string& group) const {
  const LibraryLock lock;
  // H5Lvisit + H5Oopen/H5Iget_type, unlike H5Ovisit, has one signature across HDF5 1.10-1.14.
  struct Visit {
    hid_t group;
    std::vector<std::string> names;
  };
  // Generic in the info type: H5L_info_t in 1.10, H5L_info2_t from 1.12.
  auto callback = [](hid_t, const char* name, const auto*, void* data) -> herr_t {
    auto* visit = static_cast<Visit*>(data);
    Handle object(H5Oopen(visit->group, name, H5P_DEFAULT));
    if (object.ok() && H5Iget_type(object.get()) == H5I_DATASET) visit->names.emplace_back(name);
    return 0;
  };
  if (!exists(group)) return {};
  Handle g(H5Gopen2(id_, group.c_str(), H5P_DEFAULT));
  if (!g.ok()) fail("cannot open group " + group);
  Visit visit{g.get(), {}};
  if (H5Lvisit(g.get(), H5_INDEX_NAME, H5_ITER_INC, callback, &visit) < 0) {
    fail("cannot list group " + group);
  }
  return visit.names;
}

void H5File::set_attr(const std::string& name, const std::string& value) {
  const LibraryLock lock;
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), std::max<size_t>(1, value.size()));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  Handle space(H5Screate(H5S_SCALAR));
  Handle attr(H5Acreate2(id_, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.ok() || H5Awrite(attr.get(), type.get(), value.data()) < 0) {
    fail("cannot write attribute " + name);
  }
}

void H5File::set_attr(const std::string& name, std::int64_t value) {
  const LibraryLock lock;
  Handle space(H5Screate(H5S_SCALAR));
  Handle attr(H5Acreate2(id_, name.c_str(), H5T_NATIVE_INT64, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.ok() || H5Awrite(attr.get(), H5T_NATIVE_INT64, &value) < 0) {
    fail("cannot write attribute " + name);
  }
}

bool H5File::has_attr(const std::string& name) const {
  const LibraryLock lock;
  return H5Aexists(id_, name.c_str()) > 0;
}

std::string H5File::attr_string(const std::string& name) const {
  const LibraryLock lock;
  if (!has_attr(name)) throw Error(path_ + ": attribute '" + name + "' is missing", code_);
  Handle attr(H5Aopen(id_, name.c_str(), H5P_DEFAULT));
  Handle type(H5Aget_type(attr.get()));
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0) {
    throw Error(path_ + ": attribute '" + name + "' is not a fixed-length string", code_);
  }
  std::string value(H5Tget_size(type.get()), '\0');
  if (H5Aread(attr.get(), type.get(), value.data()) < 0) fail("cannot read attribute " + name);
  value.erase(std::find(value.begin(), value.end(), '\0'), value.end());
  return value;
}

std::int64_t H5File::attr_int(const std::string& name) const {
  const LibraryLock lock;
  if (!has_attr(name)) throw Error(path_ + ": attribute '" + name + "' is missing", code_);
  Handle attr(H5Aopen(id_, name.c_str(), H5P_DEFAULT));
  std::int64_t value = 0;
  if (H5Aread(attr.get(), H5T_NATIVE_INT64, &value) < 0) fail("cannot read attribute " + name);
  return value;
}

void H5File::close() {
  const LibraryLock lock;
  if (id_ < 0) return;
  const hid_t id = id_;
  id_ = -1;
  if (H5Fflush(id, H5F_SCOPE_GLOBAL) < 0 || H5Fclose(id) < 0) {
    throw Error(path_ + ": cannot close HDF5 file: " + hdf5_message(), code_);
  }
}

std::string hdf5_version() {
  const LibraryLock lock;
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

bool hdf5_is_parallel() {
#ifdef H5_HAVE_PARALLEL
  return true;
#else
  return false;
#endif
}

}  // namespace hpctrain::io
