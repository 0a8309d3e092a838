#include "hpctrain/io/collective_file.h"

#include <hdf5.h>
#include <mpi.h>

#include <limits>
#include <vector>

#include "hdf5_handles.h"

namespace hpctrain::io {

CollectiveFile::CollectiveFile(std::int64_t id, std::string path, ExitCode code)
    : id_(id), path_(std::move(path)), code_(code) {}

CollectiveFile::CollectiveFile(CollectiveFile&& other) noexcept
    : id_(other.id_), path_(std::move(other.path_)), code_(other.code_) {
  other.id_ = -1;
}

CollectiveFile::~CollectiveFile() {
  const LibraryLock lock;
  if (id_ >= 0) H5Fclose(id_);  // collective, like the open
}

CollectiveFile CollectiveFile::open(const std::string& path, ExitCode code) {
#ifdef H5_HAVE_PARALLEL
  const LibraryLock lock;
  const Handle access(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fapl_mpio(access.get(), MPI_COMM_WORLD, MPI_INFO_NULL);
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get());
  if (id < 0) throw Error(path + ": cannot open through MPI-IO (data.io=mpio)", code);
  return CollectiveFile(id, path, code);
#else
  (void)code;
  throw ConfigError("data.io=mpio: this HDF5 was built without MPI (serial); use data.io=posix, "
                    "or build hpctrain against a parallel HDF5 (" + path + ")");
#endif
}

void CollectiveFile::read_rows_everywhere(const std::string& dataset, DType dtype, std::int64_t first,
                                          std::int64_t count, void* out) const {
#ifdef H5_HAVE_PARALLEL
  const LibraryLock lock;
  int rank = 0;
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::string where = path_ + ": dataset '" + dataset + "'";
  const Handle set(H5Dopen2(id_, dataset.c_str(), H5P_DEFAULT));
  if (!set.ok()) throw Error(where + ": cannot open", code_);
  check_layout(set.get(), where, code_);
  const Handle file_space(H5Dget_space(set.get()));
  const int dims_count = H5Sget_simple_extent_ndims(file_space.get());
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(dims_count, 1)), 1);
  H5Sget_simple_extent_dims(file_space.get(), dims.data(), nullptr);
  if (dims_count < 1 || first < 0 || count < 0 || static_cast<hsize_t>(first + count) > dims[0]) {
    throw Error(where + ": rows outside the dataset", code_);
  }
  std::int64_t row_bytes = static_cast<std::int64_t>(dtype_size(dtype));
  for (size_t d = 1; d < dims.size(); ++d) row_bytes *= static_cast<std::int64_t>(dims[d]);

  // Rank r's share: rows [first + count*r/W, first + count*(r+1)/W).
  std::vector<int> bytes(static_cast<size_t>(world));
  std::vector<int> offsets(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const std::int64_t begin = count * r / world;
    const std::int64_t end = count * (r + 1) / world;
    if ((end - begin) * row_bytes > std::numeric_limits<int>::max() ||
        begin * row_bytes > std::numeric_limits<int>::max()) {
      throw Error(where + ": a share of more than 2 GiB; data.io=mpio reads splits up to 2 GiB "
                  "per shard", code_);
    }
    bytes[static_cast<size_t>(r)] = static_cast<int>((end - begin) * row_bytes);
    offsets[static_cast<size_t>(r)] = static_cast<int>(begin * row_bytes);
  }
  const std::int64_t mine_first = first + count * rank / world;
  const std::int64_t mine_count = count * (rank + 1) / world - count * rank / world;
  std::vector<hsize_t> start(dims.size(), 0);
  std::vector<hsize_t> extent = dims;
  start[0] = static_cast<hsize_t>(mine_first);
  extent[0] = static_cast<hsize_t>(mine_count);
  if (mine_count > 0) {
    H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr);
  } else {
    H5Sselect_none(file_space.get());  // still takes part in the collective read
  }
  const Handle memory_space(H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr));
  if (mine_count == 0) H5Sselect_none(memory_space.get());
  const Handle transfer(H5Pcreate(H5P_DATASET_XFER));
  H5Pset_dxpl_mpio(transfer.get(), H5FD_MPIO_COLLECTIVE);
  auto* base = static_cast<char*>(out);
  if (H5Dread(set.get(), native_type(dtype), memory_space.get(), file_space.get(), transfer.get(),
              base + offsets[static_cast<size_t>(rank)]) < 0) {
    throw Error(where + ": collective read failed (corrupted or truncated?)", code_);
  }
  if (MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, base, bytes.data(), offsets.data(), MPI_BYTE,
                     MPI_COMM_WORLD) != MPI_SUCCESS) {
    throw CommError(where + ": MPI_Allgatherv of the shares failed");
  }
#else
  (void)dataset, (void)dtype, (void)first, (void)count, (void)out;
  throw ConfigError("data.io=mpio: this HDF5 was built without MPI (serial)");
#endif
}

}  // namespace hpctrain::io
