// The one place that knows which backends this build has (DESIGN: all `#if HT_WITH_NCCL` live here).
#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"
#include "mpi_communicator.h"

#ifndef HT_WITH_NCCL
#define HT_WITH_NCCL 0
#endif
#if HT_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include "nccl/nccl_communicator.h"
#endif

namespace hpctrain::comm {

std::vector<std::string> available_backends() {
#if HT_WITH_NCCL
  return {"mpi", "nccl"};
#else
  return {"mpi"};
#endif
}

std::string nccl_version() {
#if HT_WITH_NCCL
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
#else
  return "";
#endif
}

namespace {

// kAuto resolved for this build and tensor location; throws ConfigError when unusable. MPI takes
// CUDA tensors too, through host memory (Note [Staging] in mpi_communicator.h).
config::Backend resolve_backend(config::Backend backend, bool cuda) {
  const bool built_with_nccl = HT_WITH_NCCL != 0;
  switch (backend) {
    case config::Backend::kAuto: return cuda && built_with_nccl ? config::Backend::kNccl : config::Backend::kMpi;
    case config::Backend::kMpi: return backend;
    case config::Backend::kNccl: break;
  }
  if (!built_with_nccl) {
    throw ConfigError("dist.backend=nccl: this hpctrain was built without NCCL (CUDA toolkit or "
                      "NCCL not found at configure time); use dist.backend=mpi or auto");
  }
  if (!cuda) {
    throw ConfigError("dist.backend=nccl needs CUDA tensors, but this run is on the CPU; use "
                      "dist.backend=mpi or auto");
  }
  return backend;
}

}  // namespace

std::string gpu_bus_id([[maybe_unused]] int device) {
#if HT_WITH_NCCL
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof(id), device) != cudaSuccess) {
    cudaGetLastError();  // clear it: the caller falls back to CUDA_VISIBLE_DEVICES
    return "";
  }
  return id;
#else
  return "";
#endif
}

std::string gpu_name([[maybe_unused]] int device) {
#if HT_WITH_NCCL
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return properties.name;
#else
  return "";
#endif
}

std::int64_t gpu_memory_in_use_bytes([[maybe_unused]] int device) {
#if HT_WITH_NCCL
  int current = 0;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  // cudaMemGetInfo reports on the thread's current device.
  if (cudaGetDevice(&current) != cudaSuccess) return -1;
  const bool other = current != device;
  const bool ok = (!other || cudaSetDevice(device) == cudaSuccess) &&
                  cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
  if (other) cudaSetDevice(current);
  if (!ok) {
    cudaGetLastError();
    return -1;
  }
  return static_cast<std::int64_t>(total_bytes - free_bytes);
#else
  return -1;
#endif
}

void validate_backend(config::Backend backend, bool cuda) { resolve_backend(backend, cuda); }

std::unique_ptr<Communicator> make_communicator(config::Backend backend, Bootstrap& bootstrap,
                                                bool cuda, [[maybe_unused]] int device_index,
                                                double timeout_s, bool check_collectives) {
  if (resolve_backend(backend, cuda) == config::Backend::kMpi) {
    return std::make_unique<MpiCommunicator>(bootstrap, timeout_s, check_collectives);
  }
#if HT_WITH_NCCL
  return std::make_unique<NcclCommunicator>(bootstrap, device_index, timeout_s);
#else
  throw Error("internal: NCCL chosen in a build without NCCL");
#endif
}

}  // namespace hpctrain::comm
