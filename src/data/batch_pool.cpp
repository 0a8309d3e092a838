#include "hpctrain/data/batch_pool.h"

#include <ATen/ops/from_blob.h>

#include <cstdlib>
#include <new>

#include "hpctrain/core/error.h"

namespace hpctrain::data {

// Note [Batch memory]: a loader thread allocates each batch and the training thread frees it.
// glibc serves each thread from its own arena, so every free by the training thread locks the
// loader thread's arena while the loader allocates the next batch from it; perf put an eighth of
// a loader thread's time in waking the other side of that lock (futex wakes from glibc's arena
// lock) and another eighth in malloc's own work, against half in copying rows (`bench data`,
// one reader, file order; docs/benchmarks.md). Pooled, a batch's memory goes back to a list
// under a lock held for a push, and comes out, most recently returned first, for the next batch
// of its size. The tensor's context is the buffer's header, which holds the pool, so a batch
// outlives the Split or TokenStream that made it.
struct alignas(64) BatchPool::Buffer {
  std::shared_ptr<BatchPool> pool;  // set while a tensor uses the buffer
  std::size_t bytes = 0;            // of data, after the header

  void* data() { return reinterpret_cast<unsigned char*>(this) + sizeof(Buffer); }
};

namespace {

constexpr std::size_t kAlign = alignof(BatchPool::Buffer);  // a cache line, as libtorch's CPU allocator aligns

std::size_t rounded(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

void destroy(BatchPool::Buffer* buffer) {
  buffer->~Buffer();
  std::free(buffer);
}

}  // namespace

std::shared_ptr<BatchPool> BatchPool::make(std::int64_t max_free_bytes) {
  HT_CHECK(max_free_bytes >= 0, "BatchPool: max_free_bytes must be >= 0");
  return std::shared_ptr<BatchPool>(new BatchPool(max_free_bytes));
}

BatchPool::~BatchPool() {
  for (auto& [bytes, buffers] : free_) {
    for (Buffer* buffer : buffers) destroy(buffer);
  }
}

at::Tensor BatchPool::empty(at::IntArrayRef sizes, at::ScalarType dtype) {
  std::size_t bytes = c10::elementSize(dtype);
  for (const std::int64_t size : sizes) {
    HT_CHECK(size >= 0, "BatchPool::empty: negative size");
    bytes *= static_cast<std::size_t>(size);
  }
  Buffer* buffer = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto found = free_.find(bytes);
    if (found != free_.end() && !found->second.empty()) {
      buffer = found->second.back();
      found->second.pop_back();
      free_bytes_ -= static_cast<std::int64_t>(bytes);
    } else {
      ++allocated_;
    }
  }
  if (buffer == nullptr) {
    void* memory = std::aligned_alloc(kAlign, sizeof(Buffer) + rounded(bytes));
    if (memory == nullptr) throw std::bad_alloc();
    buffer = new (memory) Buffer;
    buffer->bytes = bytes;
  }
  buffer->pool = shared_from_this();
  return at::for_blob(buffer->data(), sizes)
      .context(buffer, &BatchPool::give_back)
      .options(at::TensorOptions().dtype(dtype))
      .target_device(at::Device(at::kCPU))
      .make_tensor();
}

void BatchPool::give_back(void* context) {
  auto* buffer = static_cast<Buffer*>(context);
  // The pool may go with the last buffer that held it: only after its lock is released.
  const std::shared_ptr<BatchPool> pool = std::move(buffer->pool);
  const auto bytes = static_cast<std::int64_t>(buffer->bytes);
  {
    const std::lock_guard<std::mutex> lock(pool->mutex_);
    if (pool->free_bytes_ + bytes <= pool->max_free_bytes_) {
      pool->free_[buffer->bytes].push_back(buffer);
      pool->free_bytes_ += bytes;
      buffer = nullptr;
    }
  }
  if (buffer != nullptr) destroy(buffer);
}

std::int64_t BatchPool::buffers_allocated() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return allocated_;
}

std::int64_t BatchPool::buffers_held() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::int64_t held = 0;
  for (const auto& [bytes, buffers] : free_) held += static_cast<std::int64_t>(buffers.size());
  return held;
}

}  // namespace hpctrain::data
