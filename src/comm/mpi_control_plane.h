// The control plane's collectives over one MPI communicator: Bootstrap's over its world, and a
// duplicate's (ControlPlane::duplicate) over a communicator of its own, which another thread uses
// while the training thread uses Bootstrap's. Private to src/comm.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/comm/control_plane.h"

namespace hpctrain::comm {

namespace mpi_plane {
// `recorded`: counted and recorded as the data plane's collectives are (comm/flight_recorder.h;
// sizes that differ between ranks by design are recorded as 0). A duplicate's are not: another
// thread issues them at other moments on each rank, and they would shift the numbered sequence
// the flight recorder and the rank watch compare between ranks.
void barrier(MPI_Comm comm, bool recorded);
void broadcast_bytes(MPI_Comm comm, std::vector<std::uint8_t>& bytes, int root, bool recorded);
std::vector<std::string> allgather_string(MPI_Comm comm, const std::string& value, bool recorded);
void allreduce_sum(MPI_Comm comm, float* values, std::int64_t count, bool recorded);
}  // namespace mpi_plane

// A duplicate's control plane: its collectives are not recorded (above).
class MpiControlPlane final : public ControlPlane {
 public:
  // Owns `comm` (freed when destroyed, unless an exception unwinds: Note [Unwinding]).
  explicit MpiControlPlane(MPI_Comm comm);
  ~MpiControlPlane() override;
  MpiControlPlane(const MpiControlPlane&) = delete;
  MpiControlPlane& operator=(const MpiControlPlane&) = delete;

  int world_rank() const override { return rank_; }
  int world_size() const override { return size_; }
  void barrier() const override { mpi_plane::barrier(comm_, false); }
  void broadcast_bytes(std::vector<std::uint8_t>& bytes, int root) const override {
    mpi_plane::broadcast_bytes(comm_, bytes, root, false);
  }
  std::vector<std::string> allgather_string(const std::string& value) const override {
    return mpi_plane::allgather_string(comm_, value, false);
  }
  void allreduce_sum(float* values, std::int64_t count) const override {
    mpi_plane::allreduce_sum(comm_, values, count, false);
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace hpctrain::comm
