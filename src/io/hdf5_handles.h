// What io/*.cpp share over the HDF5 C API: the native type of a DType, and a handle closed at
// scope exit. Private to src/io (includes hdf5.h).
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>

#include "hpctrain/io/h5_file.h"

namespace hpctrain::io {

// Note [One HDF5 caller at a time]: Debian's HDF5, like most cluster builds, is not built
// thread-safe, yet the loader's threads read shards while a checkpoint may be written in the
// background (ckpt.async). Every function of io that calls HDF5 holds this process-wide lock for
// its whole body (handles included); it is recursive because those functions call each other.
std::recursive_mutex& library_mutex();

class LibraryLock {
 public:
  LibraryLock() : lock_(library_mutex()) {}

 private:
  std::lock_guard<std::recursive_mutex> lock_;
};

// Throws Error(code) naming `where` when the open dataset `set` is stored in a layout hpctrain
// never writes (Note [Layouts read safely] in h5_file.cpp).
void check_layout(hid_t set, const std::string& where, ExitCode code);

inline hid_t native_type(DType dtype) {
  switch (dtype) {
    case DType::kUInt8: return H5T_NATIVE_UINT8;
    case DType::kUInt16: return H5T_NATIVE_UINT16;
    case DType::kUInt32: return H5T_NATIVE_UINT32;
    case DType::kInt32: return H5T_NATIVE_INT32;
    case DType::kInt64: return H5T_NATIVE_INT64;
    case DType::kFloat32: return H5T_NATIVE_FLOAT;
    case DType::kFloat64: return H5T_NATIVE_DOUBLE;
  }
  return H5T_NATIVE_UINT8;
}

// Closes an HDF5 handle of any kind at scope exit.
class Handle {
 public:
  explicit Handle(hid_t id = -1) : id_(id) {}
  ~Handle() {
    if (id_ >= 0) H5Idec_ref(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& other) noexcept : id_(other.id_) { other.id_ = -1; }
  Handle& operator=(Handle&&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
};

}  // namespace hpctrain::io
