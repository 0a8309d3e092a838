// Memory from the kernel (mmap) on the CPU, given back to it when freed, for large buffers kept
// out of malloc's heap: a sharded step's long-lived shards and optimizer state, so that the heap
// holds only a step's temporaries, and BufferPool's blocks (buffer_pool.h). In the heap, which
// keeps freed blocks below 256 MiB (Note [Allocator thresholds] in src/core/system.cpp), blocks
// of many sizes allocated and freed all through a step stay resident and fragment it. Elsewhere
// (CUDA) the device's allocator serves, whose cache reuses them. Depends on core and c10/ATen.
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

// A 1-D tensor of `numel` elements of `options`' dtype on `memory`, which holds at least as many
// bytes. `allocator` (may be null) is what the storage's memory is made with again after it has
// been freed (Note [Parameters without memory] in src/sharding/block_gatherer.cpp).
at::Tensor tensor_over(c10::DataPtr memory, std::int64_t numel, const at::TensorOptions& options,
                       c10::Allocator* allocator = nullptr);

// A zero-filled 1-D tensor of `numel` elements, its memory as allocate_mapped's.
at::Tensor mapped_zeros(std::int64_t numel, const at::TensorOptions& options);

}  // namespace hpctrain::ddp
