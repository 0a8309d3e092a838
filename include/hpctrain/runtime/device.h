// Where a rank computes: dist.device resolved against the GPUs libtorch sees, and a node-local rank
// mapped to one of them. The decisions are pure functions, unit-tested without a GPU;
// `visible_gpus()` is the one question asked of libtorch. Depends on core and c10's Device type.
#pragma once

#include <c10/core/Device.h>

#include <string>

#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/config/config.h"

namespace hpctrain::runtime {

// dist.device (auto|cpu|cuda) given the GPUs this process sees: true for CUDA. Before MPI starts.
// Throws ConfigError when cuda is asked for and no GPU is visible.
bool resolve_use_cuda(config::DeviceKind device_option, int visible_gpus);

// The GPU of the rank with node-local rank `local_rank` among `local_size` ranks on its node: GPU
// `local_rank`, or round-robin when `allow_shared`; GPU 0 when the rank sees exactly one (a GPU
// bound per task; the preflight refuses two ranks on one physical GPU). Throws ConfigError when
// the node has more ranks than GPUs (and more than one is visible) and sharing is not allowed.
int gpu_for_local_rank(int local_rank, int local_size, int visible_gpus, bool allow_shared);

// GPUs libtorch can use in this process (0 with a CPU-only libtorch); honours CUDA_VISIBLE_DEVICES.
int visible_gpus();

// cpu, or cuda:`gpu`.
c10::Device compute_device(bool use_cuda, int gpu);

// The device of this rank once MPI knows its node-local rank. Throws ConfigError as above.
c10::Device device_for_rank(bool use_cuda, const comm::Topology& topology, bool allow_shared_gpu);

// The float32 math of CUDA kernels, process-wide in libtorch: `tf32` lets cuBLAS and cuDNN run
// float32 products and convolutions on TF32 tensor cores (train.tf32); `cudnn_benchmark` has
// cuDNN time its convolution algorithms per input shape (train.cudnn_benchmark). Flags only:
// harmless on a CPU-only libtorch.
void set_cuda_math(bool tf32, bool cudnn_benchmark);

}  // namespace hpctrain::runtime
