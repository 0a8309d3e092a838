// MPI-IO access to an HDF5 file (data.io=mpio): every rank of MPI_COMM_WORLD gets the same rows of
// a dataset while the file system serves each byte once. Rank r reads its 1/W share of the rows
// with one collective H5Dread through HDF5's MPI-IO driver, and MPI_Allgatherv hands every rank
// the others' shares. Only io/*.cpp includes mpi.h and hdf5.h. Depends on core.
#pragma once

#include <cstdint>
#include <string>

#include "hpctrain/core/error.h"
#include "hpctrain/io/h5_file.h"

namespace hpctrain::io {

class CollectiveFile {
 public:
  // Collective over MPI_COMM_WORLD (MPI must be running): opens `path` read-only with the MPI-IO
  // driver. Throws Error(code) when it cannot, or ConfigError when HDF5 was built without MPI.
  static CollectiveFile open(const std::string& path, ExitCode code);
  CollectiveFile(CollectiveFile&& other) noexcept;
  CollectiveFile& operator=(CollectiveFile&&) = delete;
  CollectiveFile(const CollectiveFile&) = delete;
  CollectiveFile& operator=(const CollectiveFile&) = delete;
  ~CollectiveFile();

  // Collective: rows [first, first + count) of `dataset`, converted to `dtype`, into `out` on
  // every rank.
  void read_rows_everywhere(const std::string& dataset, DType dtype, std::int64_t first,
                            std::int64_t count, void* out) const;

 private:
  CollectiveFile(std::int64_t id, std::string path, ExitCode code);

  std::int64_t id_ = -1;  // hid_t
  std::string path_;
  ExitCode code_ = ExitCode::kData;
};

}  // namespace hpctrain::io
