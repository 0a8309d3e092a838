#include "hpctrain/data/batch_pool.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <cstdlib>
#include <limits>
#include <new>
#include <string>

#include "hpctrain/core/error.h"

namespace hpctrain::data {

// Note [Batch memory]: a loader thread allocates each batch and the training thread frees it.
// glibc serves each thread from its own arena, so every free by the training thread locks the
// loader thread's arena while the loader allocates the next batch from it; perf put an eighth of
// a loader thread's time in waking the other side of that lock (futex wakes from glibc's arena
// lock) and another eighth in malloc's own work, against half in copying rows (`bench data`,
// one reader, file order; docs/benchmarks.md). Pooled, a batch's memory goes back to a list
// under a lock held for a push, and comes out, most recently returned first, for the next batch
// of its size. A buffer is allocated only when none of its size is back, so the pool holds no
// more of a size than were in use at once (the loader's batches in flight, and those the loop
// holds): no cap to tune, and the memory is what the loader needed anyway. The tensor's context
// is the buffer's header, which holds the pool, so a batch outlives the Split or TokenStream that
// made it. Returning a buffer cannot throw (it runs in a tensor's destructor): its size's entry
// exists and its list has room reserved for every buffer of that size.
struct alignas(64) BatchPool::Buffer {
  std::shared_ptr<BatchPool> pool;  // set while a tensor uses the buffer
  std::size_t bytes = 0;            // of data, after the header

  void* data() { return reinterpret_cast<unsigned char*>(this) + sizeof(Buffer); }
};

namespace {

constexpr std::size_t kAlign = 64;  // a cache line, as libtorch's CPU allocator aligns

// The bytes of a tensor of `sizes` and `dtype`, or 0 with `fits` false when they overflow.
std::size_t tensor_bytes(at::IntArrayRef sizes, at::ScalarType dtype, bool& fits) {
  std::size_t bytes = c10::elementSize(dtype);
  fits = true;
  for (const std::int64_t size : sizes) {
    HT_CHECK(size >= 0, "BatchPool::empty: negative size");
    fits = fits && !__builtin_mul_overflow(bytes, static_cast<std::size_t>(size), &bytes);
  }
  return fits ? bytes : 0;
}

}  // namespace

std::shared_ptr<BatchPool> BatchPool::make() { return std::shared_ptr<BatchPool>(new BatchPool()); }

BatchPool::~BatchPool() {
  for (auto& [bytes, size] : sizes_) {
    for (Buffer* buffer : size.returned) destroy(buffer);
  }
}

void BatchPool::destroy(Buffer* buffer) {
  buffer->~Buffer();
  std::free(buffer);
}

at::Tensor BatchPool::empty(at::IntArrayRef sizes, at::ScalarType dtype, bool pinned) {
  if (pinned) return at::empty(sizes, at::TensorOptions().dtype(dtype).pinned_memory(true));
  static_assert(alignof(Buffer) == kAlign && sizeof(Buffer) == kAlign, "data must start a cache line in");
  bool fits = true;
  const std::size_t bytes = tensor_bytes(sizes, dtype, fits);
  if (!fits || bytes > std::numeric_limits<std::size_t>::max() - 2 * kAlign) {
    std::string shape;
    for (const std::int64_t size : sizes) shape += (shape.empty() ? "" : ", ") + std::to_string(size);
    throw DataError("a batch of shape [" + shape + "] has more bytes than memory can address; check the "
                    "dataset's sample shape (manifest.json) and the batch size");
  }
  Buffer* buffer = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    Size& size = sizes_[bytes];
    if (!size.returned.empty()) {
      buffer = size.returned.back();
      size.returned.pop_back();
    } else {
      size.returned.reserve(static_cast<size_t>(size.allocated + 1));  // room for its return
      void* memory = std::aligned_alloc(kAlign, sizeof(Buffer) + (bytes + kAlign - 1) / kAlign * kAlign);
      if (memory == nullptr) throw std::bad_alloc();
      buffer = new (memory) Buffer;
      buffer->bytes = bytes;
      ++size.allocated;
    }
  }
  buffer->pool = shared_from_this();
  // From here the tensor maker owns the buffer: give_back returns it should make_tensor throw.
  return at::for_blob(buffer->data(), sizes)
      .context(buffer, &BatchPool::give_back)
      .options(at::TensorOptions().dtype(dtype))
      .target_device(at::Device(at::kCPU))
      .make_tensor();
}

void BatchPool::give_back(void* buffer) {
  auto* returned = static_cast<Buffer*>(buffer);
  // The pool may go with the last buffer that held it: only after its lock is released.
  const std::shared_ptr<BatchPool> pool = std::move(returned->pool);
  const std::lock_guard<std::mutex> lock(pool->mutex_);
  pool->sizes_.find(returned->bytes)->second.returned.push_back(returned);  // room reserved
}

std::int64_t BatchPool::buffers_allocated() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::int64_t allocated = 0;
  for (const auto& [bytes, size] : sizes_) allocated += size.allocated;
  return allocated;
}

std::int64_t BatchPool::buffers_held() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::int64_t held = 0;
  for (const auto& [bytes, size] : sizes_) held += static_cast<std::int64_t>(size.returned.size());
  return held;
}

}  // namespace hpctrain::data
