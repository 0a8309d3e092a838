// Memory for large buffers that live for part of a step (stage 3's gathered parameters): on the
// CPU it comes from the kernel (mmap) and goes back to it when freed, so the resident size falls
// at once. In malloc's heap, which keeps freed blocks below 256 MiB (Note [Allocator thresholds]
// in src/core/system.cpp), blocks of many sizes allocated and freed all through a step stay
// resident and fragment it. Elsewhere (CUDA) the device's allocator serves, whose cache reuses
// them. Depends on core and c10/ATen.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>

namespace hpctrain::ddp {

// `bytes` of memory on `device`: mapped on the CPU (zero-filled), else from `device_allocator`.
// Throws Error when the kernel refuses.
c10::DataPtr allocate_mapped(std::size_t bytes, c10::Device device, c10::Allocator& device_allocator);

// A zero-filled 1-D tensor of `numel` elements, its memory as allocate_mapped's.
at::Tensor mapped_zeros(std::int64_t numel, const at::TensorOptions& options);

}  // namespace hpctrain::ddp
