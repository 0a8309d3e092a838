// The data plane: collectives over tensors behind one interface, so the gradient engine and the
// trainer never know whether MPI or NCCL carries the bytes. Every collective is asynchronous and
// returns a Work handle. Depends on core, config.h's choices and ATen's tensor type only (no
// mpi.h, no nccl.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/config/config.h"

namespace hpctrain::comm {

class Bootstrap;

enum class ReduceOp { kSum, kAvg };

// A collective in flight. wait() returns when the result is in the tensor (for NCCL: ordered before
// later work on the compute stream) and throws CommError on failure or timeout.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string backend() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Collective: every rank calls these in the same order with tensors of the same dtype and shape.
  // The tensor must be contiguous; results are in place. The Work keeps the tensors it is given
  // until the collective is complete (MPI: it drops them on completion; NCCL: when wait() has
  // ordered the compute stream after it), so a caller may drop its own at once.
  virtual std::unique_ptr<Work> allreduce(at::Tensor& tensor, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> broadcast(at::Tensor& tensor, int root) = 0;
  // allreduce(tensor, op)->wait() for a caller that would wait at once. The MPI communicator runs
  // it on the calling thread when no collective is queued and a rank watch runs, saving the
  // hand-off to its worker and back (Note [Blocking collectives] in mpi_communicator.cpp); run
  // there, a collective that does not complete within the timeout ends the job (exit 5) through
  // the rank watch; queued, it throws CommError from the wait, as allreduce's does.
  virtual void allreduce_blocking(at::Tensor& tensor, ReduceOp op) { allreduce(tensor, op)->wait(); }
  // `output` (size() x input.numel() elements) receives every rank's `input`, in rank order.
  // In place when `input` is the memory of chunk rank() of `output` (NCCL's convention).
  virtual std::unique_ptr<Work> allgather(const at::Tensor& input, at::Tensor& output) = 0;
  // The in-place allgather into the 1-D `output`, whose memory and chunk rank() `fill` makes just
  // before the gather starts. The MPI communicator runs `fill` on its worker, after every collective
  // issued earlier has completed and dropped its tensors: memory those gave back (a reduced gradient
  // bucket) can serve the gather (Note [Memory made when the gather starts]). Here, at once.
  virtual std::unique_ptr<Work> allgather_filled(at::Tensor& output, const std::function<void()>& fill) {
    fill();
    const std::int64_t chunk = output.numel() / size();
    return allgather(output.narrow(0, chunk * rank(), chunk), output);
  }
  // `input` holds size() equal chunks; chunk r, reduced over all ranks, lands in rank r's
  // `output` (input.numel() / size() elements). The sharded-optimizer building block. In place
  // when `output` is the memory of chunk rank() of `input`; `input` is then left undefined.
  virtual std::unique_ptr<Work> reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                               ReduceOp op) = 0;
  // Collective.
  virtual void barrier() = 0;
};

// Backends compiled into this build, e.g. {"mpi", "nccl"}.
std::vector<std::string> available_backends();

// Checks that `backend` can carry tensors on CUDA (`cuda`) or CPU in this build, before MPI starts.
// Throws ConfigError saying what to use instead.
void validate_backend(config::Backend backend, bool cuda);

// Resolves kAuto for tensors on CUDA (`cuda`) or CPU and builds the communicator. Collective.
// A collective that has not completed `timeout_s` after wait() began throws CommError there.
// `check_collectives` (dist.check_collectives): the MPI communicator checks that the ranks issue
// the same collective before each one. Throws ConfigError when the backend is unknown or
// unusable here, saying what to use instead.
std::unique_ptr<Communicator> make_communicator(config::Backend backend, Bootstrap& bootstrap,
                                                bool cuda, int device_index, double timeout_s = 300,
                                                bool check_collectives = true);

// NCCL's version as "2.28.9" when built with NCCL, else "".
std::string nccl_version();

// The PCI bus id of CUDA device `device` ("0000:3b:00.0"): which physical GPU it is, whatever
// CUDA_VISIBLE_DEVICES or a cgroup renumbered. "" in a build without CUDA + NCCL, or on error.
std::string gpu_bus_id(int device);

// The CUDA runtime's name of device `device` ("NVIDIA H100 80GB HBM3"); "" as gpu_bus_id.
std::string gpu_name(int device);

// Memory in use on device `device` as the driver counts it (total - free, nvidia-smi's figure:
// libtorch's cached blocks and every process's allocations included); -1 as gpu_bus_id.
std::int64_t gpu_memory_in_use_bytes(int device);

}  // namespace hpctrain::comm
