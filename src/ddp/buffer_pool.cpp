#include "hpctrain/ddp/buffer_pool.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "hpctrain/ddp/mapped_memory.h"

namespace hpctrain::ddp {

struct BufferPool::Shelf {
  struct Block {
    std::size_t bytes;
    c10::DataPtr memory;  // mapped; unmapped when destroyed
  };
  std::mutex mutex;  // blocks are taken and given back on autograd's threads too
  std::vector<Block> free;
  std::size_t mapped = 0;
  std::size_t largest_request = 0;

  // The smallest free block of at least `bytes`, taken off the shelf; else a Block without
  // memory saying how large a block to map, after unmapping the largest free block, which is too
  // small for this request. New blocks are as large as the largest request yet, so that requests
  // of near sizes (a model's buckets) share blocks: pages a request does not touch cost nothing.
  Block take(std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex);
    largest_request = std::max(largest_request, bytes);
    auto best = free.end();
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (it->bytes >= bytes && (best == free.end() || it->bytes < best->bytes)) best = it;
    }
    if (best == free.end()) {
      const auto too_small = std::max_element(free.begin(), free.end(),
                                              [](const Block& a, const Block& b) { return a.bytes < b.bytes; });
      if (too_small != free.end()) {
        mapped -= too_small->bytes;
        free.erase(too_small);
      }
      return {largest_request, c10::DataPtr()};
    }
    Block block = std::move(*best);
    free.erase(best);
    return block;
  }

  // What a lent block's DataPtr owns: the block, and the shelf it goes back to.
  struct Lease {
    std::shared_ptr<Shelf> shelf;
    Block block;
  };

  static void give_back(void* context) {
    auto* lease = static_cast<Lease*>(context);
    {
      const std::lock_guard<std::mutex> lock(lease->shelf->mutex);
      lease->shelf->free.push_back(std::move(lease->block));
    }
    delete lease;
  }
};

BufferPool::BufferPool() : shelf_(std::make_shared<Shelf>()) {}

c10::DataPtr BufferPool::allocate(std::size_t bytes, c10::Device device, c10::Allocator& device_allocator) {
  if (!device.is_cpu() || bytes < kSmallestPooledBytes) return device_allocator.allocate(bytes);
  Shelf::Block block = shelf_->take(bytes);
  if (!block.memory) {
    block.memory = allocate_mapped(block.bytes, device, device_allocator);
    const std::lock_guard<std::mutex> lock(shelf_->mutex);
    shelf_->mapped += block.bytes;
  }
  void* data = block.memory.get();
  return c10::DataPtr(data, new Shelf::Lease{shelf_, std::move(block)}, &Shelf::give_back, device);
}

at::Tensor BufferPool::empty(std::int64_t numel, const at::TensorOptions& options) {
  const auto bytes = static_cast<std::size_t>(numel) * options.dtype().itemsize();
  c10::Allocator* device_allocator = c10::GetAllocator(options.device().type());
  return tensor_over(allocate(bytes, options.device(), *device_allocator), numel, options);
}

std::size_t BufferPool::mapped_bytes() const {
  const std::lock_guard<std::mutex> lock(shelf_->mutex);
  return shelf_->mapped;
}

}  // namespace hpctrain::ddp
