#include "mpi_control_plane.h"

#include <exception>
#include <limits>
#include <optional>

#include "hpctrain/comm/flight_recorder.h"
#include "hpctrain/core/error.h"
#include "mpi_check.h"

namespace hpctrain::comm {

namespace mpi_plane {
namespace {

// A flight::Blocking while it lives, when `recorded`.
class Recording {
 public:
  Recording(bool recorded, const char* op, std::int64_t bytes, const char* dtype) {
    if (recorded) blocking_.emplace(op, bytes, dtype);
  }

 private:
  std::optional<flight::Blocking> blocking_;
};

}  // namespace

void barrier(MPI_Comm comm, bool recorded) {
  const Recording recording(recorded, "barrier (control)", 0, "none");
  HT_MPI_CHECK(MPI_Barrier(comm));
}

void broadcast_bytes(MPI_Comm comm, std::vector<std::uint8_t>& bytes, int root, bool recorded) {
  const Recording recording(recorded, "broadcast (control)", 0, "byte");
  unsigned long long size = bytes.size();
  HT_MPI_CHECK(MPI_Bcast(&size, 1, MPI_UNSIGNED_LONG_LONG, root, comm));
  bytes.resize(size);
  HT_MPI_CHECK(MPI_Bcast(bytes.data(), static_cast<int>(size), MPI_BYTE, root, comm));
}

std::vector<std::string> allgather_string(MPI_Comm comm, const std::string& value, bool recorded) {
  const Recording recording(recorded, "allgather (control)", 0, "char");
  int n = 0;
  HT_MPI_CHECK(MPI_Comm_size(comm, &n));
  int length = static_cast<int>(value.size());
  std::vector<int> lengths(n);
  HT_MPI_CHECK(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm));
  std::vector<int> offsets(n, 0);
  for (int r = 1; r < n; ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(static_cast<size_t>(offsets[n - 1] + lengths[n - 1]), '\0');
  HT_MPI_CHECK(MPI_Allgatherv(value.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                              comm));
  std::vector<std::string> out(n);
  for (int r = 0; r < n; ++r) out[r] = all.substr(offsets[r], lengths[r]);
  return out;
}

void allreduce_sum(MPI_Comm comm, float* values, std::int64_t count, bool recorded) {
  HT_CHECK(count <= std::numeric_limits<int>::max(), "allreduce_sum: more than INT_MAX floats");
  const Recording recording(recorded, "allreduce (control)", count * static_cast<std::int64_t>(sizeof(float)), "float");
  HT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm));
}

}  // namespace mpi_plane

MpiControlPlane::MpiControlPlane(MPI_Comm comm) : comm_(comm) {
  HT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  HT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiControlPlane::~MpiControlPlane() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // Unwinding, a thread may still be inside a collective on it, and main() is about to abort.
  if (finalized || std::uncaught_exceptions() > 0) return;
  MPI_Comm_free(&comm_);
}

}  // namespace hpctrain::comm
