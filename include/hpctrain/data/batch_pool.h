// Memory for batches that is used again: a batch tensor the training loop drops gives its memory
// back to the pool, and the next tensor of the same size takes it, the most recently returned
// first. Without it each batch is a fresh allocation by a loader thread that the training thread
// frees, and the two threads contend for the loader thread's malloc arena (Note [Batch memory] in
// batch_pool.cpp). The pool holds, of each size, only as many buffers as were in use at once.
// Thread-safe; tensors may outlive the pool's owner. Depends on core, ATen.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace hpctrain::data {

class BatchPool : public std::enable_shared_from_this<BatchPool> {
 public:
  static std::shared_ptr<BatchPool> make();
  ~BatchPool();  // frees the buffers it holds (each tensor keeps its pool alive)
  BatchPool(const BatchPool&) = delete;
  BatchPool& operator=(const BatchPool&) = delete;

  // A contiguous CPU tensor of `sizes` and `dtype`, not initialized. Throws std::bad_alloc when
  // the memory cannot be had, DataError when its byte count overflows. `pinned`: page-locked
  // memory from the CUDA host allocator instead, which keeps its blocks for reuse itself (needs a
  // CUDA build of libtorch).
  at::Tensor empty(at::IntArrayRef sizes, at::ScalarType dtype, bool pinned = false);

  // Buffers allocated so far, and returned buffers held now (for tests and benchmarks).
  std::int64_t buffers_allocated() const;
  std::int64_t buffers_held() const;

 private:
  struct Buffer;  // a header in front of the tensor's bytes
  struct Size {   // the buffers of one byte size
    std::vector<Buffer*> returned;
    std::int64_t allocated = 0;
  };

  BatchPool() = default;
  static void give_back(void* buffer);  // a tensor's context deleter
  static void destroy(Buffer* buffer);

  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, Size> sizes_;  // by data bytes
};

}  // namespace hpctrain::data
