// The small host-side collectives that set-up and step boundaries need: who this rank is, a
// barrier, bytes broadcast, strings gathered, flags summed. Bootstrap carries them over MPI; tests
// play them in one process (tests/support/fake_communicator.h). Separate from the data plane
// (Communicator): nothing here waits behind a gradient bucket, and NCCL never carries it.
// Depends on std only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hpctrain::comm {

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  virtual int world_rank() const = 0;
  virtual int world_size() const = 0;

  // Collective: every rank calls these in the same order.
  virtual void barrier() const = 0;
  // `bytes` on `root` is copied to every rank (resized there).
  virtual void broadcast_bytes(std::vector<std::uint8_t>& bytes, int root) const = 0;
  // Every rank's string, indexed by world rank.
  virtual std::vector<std::string> allgather_string(const std::string& value) const = 0;
  // Element-wise sum over all ranks of `count` floats in host memory, in place.
  virtual void allreduce_sum(float* values, std::int64_t count) const = 0;
  // A control plane of its own over the same ranks, for another thread to use while this one is
  // in use (a sharded checkpoint's background writer); nullptr where there can be none (an MPI
  // without MPI_THREAD_MULTIPLE, a plane that has no second).
  virtual std::unique_ptr<ControlPlane> duplicate() const { return nullptr; }
};

}  // namespace hpctrain::comm
