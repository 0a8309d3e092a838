// Memory for batches that is used again: a batch tensor the training loop drops gives its memory
// back to the pool, and the next tensor of the same size takes it, the most recently returned
// first. Without it each batch is a fresh allocation by a loader thread that the training thread
// frees, and the two threads contend for the loader thread's malloc arena (Note [Batch memory] in
// batch_pool.cpp). Thread-safe; tensors may outlive the pool's owner. Depends on ATen.
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
  // Keeps at most `max_free_bytes` of returned buffers (more are freed at once).
  static std::shared_ptr<BatchPool> make(std::int64_t max_free_bytes = std::int64_t{64} << 20);
  ~BatchPool();  // frees the buffers it holds (each tensor keeps its pool alive)
  BatchPool(const BatchPool&) = delete;
  BatchPool& operator=(const BatchPool&) = delete;

  // A contiguous CPU tensor of `sizes` and `dtype`, not initialized.
  at::Tensor empty(at::IntArrayRef sizes, at::ScalarType dtype);

  // Buffers allocated so far, and returned buffers held now (for tests and benchmarks).
  std::int64_t buffers_allocated() const;
  std::int64_t buffers_held() const;

  struct Buffer;  // a header in front of the tensor's bytes

 private:
  explicit BatchPool(std::int64_t max_free_bytes) : max_free_bytes_(max_free_bytes) {}
  static void give_back(void* buffer);

  const std::int64_t max_free_bytes_;
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<Buffer*>> free_;  // by data bytes
  std::int64_t free_bytes_ = 0;
  std::int64_t allocated_ = 0;
};

}  // namespace hpctrain::data
