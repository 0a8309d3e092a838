// Reused memory for the large buffers a sharded step allocates and frees many times over: ZeRO's
// released gradient buckets, stage 3's gathered units and the all-gathers of updated chunks. On the
// CPU, a buffer freed goes back to the pool, still mapped and resident, and the next one that fits
// takes it: no page faults after the first step, and none of the heap fragmentation that blocks of
// many sizes freed all through a step cause there (Note [Allocator thresholds] in
// src/core/system.cpp). The pool holds as many blocks as were ever in use at once. Elsewhere
// (CUDA) the device's caching allocator does this already and serves. Depends on core and c10/ATen.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace hpctrain::ddp {

class BufferPool {
 public:
  // A handle: copies share the pool.
  BufferPool();

  // `bytes` on `device`, uninitialized: on the CPU the smallest free block that holds them, or a
  // new mapped one as large as the largest request yet (a free block too small for it is
  // unmapped, so the pool never holds more blocks than were in use at once); small requests and
  // other devices go to `device_allocator`. Freeing
  // the DataPtr gives its block back; it may outlive the pool.
  c10::DataPtr allocate(std::size_t bytes, c10::Device device, c10::Allocator& device_allocator);
  // A 1-D tensor of `numel` uninitialized elements on allocate()'s memory.
  at::Tensor empty(std::int64_t numel, const at::TensorOptions& options);

  // Bytes mapped by the pool now, in use or free.
  std::size_t mapped_bytes() const;

  // Requests below this are served by the device's allocator: small buffers fragment little.
  static constexpr std::size_t kSmallestPooledBytes = std::size_t{1} << 20;

 private:
  struct Shelf;
  std::shared_ptr<Shelf> shelf_;
};

}  // namespace hpctrain::ddp
