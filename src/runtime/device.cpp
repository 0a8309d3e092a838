#include "hpctrain/runtime/device.h"

#include <ATen/Context.h>
#include <torch/cuda.h>

#include <cstdlib>

#include "hpctrain/core/error.h"

namespace hpctrain::runtime {
namespace {

std::string visible_devices_text() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  return value == nullptr ? "unset" : "'" + std::string(value) + "'";
}

}  // namespace

bool resolve_use_cuda(config::DeviceKind device_option, int visible_gpus) {
  if (device_option == config::DeviceKind::kCpu) return false;
  if (device_option == config::DeviceKind::kAuto) return visible_gpus > 0;
  if (visible_gpus == 0) {
    throw ConfigError("dist.device=cuda, but libtorch sees no GPU (CPU-only libtorch, no GPU on this "
                      "node, or CUDA_VISIBLE_DEVICES=" + visible_devices_text() +
                      " hides them); use dist.device=cpu or auto");
  }
  return true;
}

int gpu_for_local_rank(int local_rank, int local_size, int visible_gpus, bool allow_shared) {
  HT_CHECK(visible_gpus > 0 && local_rank >= 0 && local_rank < local_size, "bad GPU mapping input");
  // One visible GPU per rank is how sites that bind a GPU to each task (srun --gpus-per-task=1,
  // --gpu-bind) present them: every rank's GPU 0 is a different device. Whether two ranks really
  // share one is decided by the preflight, which compares the physical GPUs (preflight.h).
  if (visible_gpus == 1) return 0;
  if (local_size > visible_gpus && !allow_shared) {
    throw ConfigError(std::to_string(local_size) + " ranks on this node but " +
                      std::to_string(visible_gpus) + " visible GPU(s) (CUDA_VISIBLE_DEVICES=" +
                      visible_devices_text() + "); start one rank per GPU, or set "
                      "dist.allow_shared_gpu=true to share them");
  }
  return local_rank % visible_gpus;
}

int visible_gpus() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

c10::Device compute_device(bool use_cuda, int gpu) {
  return use_cuda ? c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(gpu))
                  : c10::Device(c10::DeviceType::CPU);
}

c10::Device device_for_rank(bool use_cuda, const comm::Topology& topology, bool allow_shared_gpu) {
  if (!use_cuda) return compute_device(false, 0);
  return compute_device(true, gpu_for_local_rank(topology.local_rank, topology.local_size,
                                                 visible_gpus(), allow_shared_gpu));
}

void set_cuda_math(bool tf32, bool cudnn_benchmark) {
  at::Context& context = at::globalContext();
  context.setAllowTF32CuBLAS(tf32);
  context.setAllowTF32CuDNN(tf32);
  context.setBenchmarkCuDNN(cudnn_benchmark);
}

}  // namespace hpctrain::runtime
