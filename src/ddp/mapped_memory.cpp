#include "hpctrain/ddp/mapped_memory.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "hpctrain/core/error.h"

namespace hpctrain::ddp {
namespace {

struct Mapping {
  void* address;
  std::size_t bytes;
};

void unmap(void* context) {
  const auto* mapping = static_cast<Mapping*>(context);
  munmap(mapping->address, mapping->bytes);
  delete mapping;
}

}  // namespace

c10::DataPtr allocate_mapped(std::size_t bytes, c10::Device device, c10::Allocator& device_allocator) {
  if (!device.is_cpu() || bytes == 0) return device_allocator.allocate(bytes);
  void* address = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (address == MAP_FAILED) {
    throw Error("out of memory: mapping " + std::to_string(bytes) + " bytes for a sharded step failed: " +
                std::strerror(errno));
  }
  return c10::DataPtr(address, new Mapping{address, bytes}, &unmap, device);
}

at::Tensor tensor_over(c10::DataPtr memory, std::int64_t numel, const at::TensorOptions& options,
                       c10::Allocator* allocator) {
  const auto bytes = static_cast<std::size_t>(numel) * options.dtype().itemsize();
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(memory), allocator, /*resizable=*/false);
  return at::empty({0}, options).set_(storage, 0, {numel}, {1});
}

at::Tensor mapped_zeros(std::int64_t numel, const at::TensorOptions& options) {
  if (options.device().type() != c10::kCPU) return at::zeros({numel}, options);
  const auto bytes = static_cast<std::size_t>(numel) * options.dtype().itemsize();
  return tensor_over(allocate_mapped(bytes, options.device(), *c10::GetCPUAllocator()), numel, options);
}

}  // namespace hpctrain::ddp
