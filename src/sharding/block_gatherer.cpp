#include "block_gatherer.h"

#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>
#include <torch/torch.h>

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "hpctrain/core/error.h"
#include "hpctrain/ddp/mapped_memory.h"
#include "hpctrain/ddp/shard_plan.h"
#include "hpctrain/model/parameter_memory.h"

namespace hpctrain::sharding {
namespace {

// Note [Parameters without memory]: a unit's whole buffer is one tensor, and each of its
// parameters is set (set_data, Python's `param.data = ...`) to a view of it, so they all share its
// storage. Releasing the unit frees the storage's memory and leaves it zero bytes long; gathering
// allocates it again and all-gathers every rank's chunk into it. The parameters, and the tensors
// autograd saved for backward that refer to them, keep their shape and offset throughout and
// read the gathered values again: PyTorch's FSDP resizes the storage the same way. Between
// gathers nothing may read a parameter (the optimizer works on the shards). model::release_memory
// is that release.

// A read-only file mapping's pages under `tensor`, out of this process's resident memory (the
// page cache keeps them): read once, they would otherwise add up to the whole file per rank.
void drop_pages(const at::Tensor& tensor) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(tensor.data_ptr()) / page * page;
  const auto end = reinterpret_cast<std::uintptr_t>(tensor.data_ptr()) + tensor.nbytes();
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void allocate_memory(const at::Tensor& tensor, ddp::BufferPool& pool) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<size_t>(tensor.numel()) * tensor.element_size();
  // Pooled (ddp/buffer_pool.h): a released unit's block serves the next gather, or a bucket.
  storage->set_data_ptr_noswap(pool.allocate(bytes, tensor.device(), *storage->allocator()));
  storage->set_nbytes(bytes);
}

}  // namespace

namespace {

// The model's blocks in forward order, consecutive blocks sharing a group until it holds
// `unit_bytes` (FSDP's size-based wrapping: a small block would otherwise cost a collective of
// its own); each group's trainable parameters, by index.
struct BlockGroups {
  std::vector<std::vector<size_t>> groups{1};
  std::vector<size_t> group_of_block;
  std::vector<char> taken;  // parameter -> in some block
};

BlockGroups group_blocks(model::Model& model, const std::vector<at::Tensor>& parameters, std::int64_t unit_bytes) {
  std::map<const c10::TensorImpl*, size_t> index;
  for (size_t i = 0; i < parameters.size(); ++i) index[parameters[i].unsafeGetTensorImpl()] = i;
  BlockGroups out;
  out.taken.assign(parameters.size(), 0);
  std::int64_t group_bytes = 0;
  for (const auto& block : model.blocks()) {
    if (group_bytes >= unit_bytes) {
      out.groups.emplace_back();
      group_bytes = 0;
    }
    for (const at::Tensor& p : block->parameters()) {
      const auto found = index.find(p.unsafeGetTensorImpl());
      if (found == index.end() || out.taken[found->second]) continue;  // frozen, or another block's
      out.taken[found->second] = 1;
      out.groups.back().push_back(found->second);
      group_bytes += static_cast<std::int64_t>(p.nbytes());
    }
    out.group_of_block.push_back(out.groups.size() - 1);
  }
  return out;
}

}  // namespace

UnitPlan plan_units(model::Model& model, const std::vector<at::Tensor>& parameters, std::int64_t unit_bytes) {
  const BlockGroups grouped = group_blocks(model, parameters, unit_bytes);
  UnitPlan plan;
  const auto add_unit = [&](std::vector<size_t> members) {
    std::sort(members.begin(), members.end());
    ddp::Bucket unit{members, 0};
    for (const size_t i : members) unit.numel += parameters[i].numel();
    plan.units.push_back(unit);
    return plan.units.size() - 1;
  };
  // Backward fills the last group first: its unit is reduced first.
  std::vector<std::optional<size_t>> unit_of_group(grouped.groups.size());
  for (size_t g = grouped.groups.size(); g-- > 0;) {
    if (!grouped.groups[g].empty()) unit_of_group[g] = add_unit(grouped.groups[g]);
  }
  for (const size_t g : grouped.group_of_block) plan.unit_of_block.push_back(unit_of_group[g]);
  std::vector<size_t> rest;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!grouped.taken[i]) rest.push_back(i);
  }
  if (!rest.empty()) plan.outside = add_unit(rest);
  return plan;
}

BlockGatherer::BlockGatherer(comm::Communicator& comm, const std::vector<at::Tensor>& parameters,
                             const UnitPlan& plan, ddp::BufferPool& pool, model::DeferredWeights& deferred)
    : comm_(comm), pool_(pool), unit_of_block_(plan.unit_of_block), outside_(plan.outside) {
  c10::NoGradGuard no_grad;
  for (const ddp::Bucket& planned : plan.units) {
    const std::int64_t padded = ddp::padded_numel(planned.numel, comm.size());
    const std::int64_t chunk = padded / comm.size();
    Unit unit;
    // A pooled block, which serves the steps' gathers after; the storage keeps the device's
    // allocator, which allocate_memory falls back on.
    const at::TensorOptions options = parameters[planned.parameters.front()].options();
    c10::Allocator* device_allocator = c10::GetAllocator(options.device().type());
    const auto bytes = static_cast<size_t>(padded) * options.dtype().itemsize();
    unit.whole = ddp::tensor_over(pool.allocate(bytes, options.device(), *device_allocator), padded, options,
                                  device_allocator);
    unit.whole.narrow(0, planned.numel, padded - planned.numel).zero_();
    std::int64_t offset = 0;
    for (const size_t i : planned.parameters) {
      at::Tensor parameter = parameters[i];
      const at::Tensor place = unit.whole.narrow(0, offset, parameter.numel());
      if (model::lacks_memory(parameter)) {
        const auto found = deferred.sources.find(parameter.unsafeGetTensorImpl());
        HT_CHECK(found != deferred.sources.end(), "a parameter without memory has no value to read");
        const at::Tensor& source = found->second;
        place.copy_(source.reshape({-1}));
        if (deferred.mapped) drop_pages(source);
      } else {
        place.copy_(parameter.detach().reshape({-1}));
      }
      parameter.set_data(place.view(parameter.sizes()));
      offset += parameter.numel();
    }
    unit.shard = ddp::mapped_zeros(chunk, unit.whole.options());  // long-lived: kept out of the step's heap
    unit.shard.copy_(unit.whole.narrow(0, chunk * comm.rank(), chunk));
    model::release_memory(unit.whole);
    units_.push_back(std::move(unit));
  }
  deferred = model::DeferredWeights{};  // the file's mapping goes with it
  // The model was built whole; malloc's heap would keep what it freed resident (its thresholds
  // are high, Note [Allocator thresholds]). Given back, a rank's peak is the larger of the build's
  // and a step's, not their sum.
  malloc_trim(0);
}

BlockGatherer::~BlockGatherer() = default;

std::int64_t BlockGatherer::shard_bytes() const {
  std::int64_t bytes = 0;
  for (const Unit& unit : units_) bytes += static_cast<std::int64_t>(unit.shard.nbytes());
  return bytes;
}

void BlockGatherer::gather_all() {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (size_t u = 0; u < units_.size(); ++u) gather(u);
  for (size_t u = 0; u < units_.size(); ++u) wait(u);
}

void BlockGatherer::keep_changes_and_release_all() {
  const std::lock_guard<std::mutex> lock(mutex_);
  c10::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    if (!unit.gathered) continue;
    wait(u);
    const std::int64_t chunk = unit.shard.numel();
    unit.shard.copy_(unit.whole.narrow(0, chunk * comm_.rank(), chunk));
    release_unlocked(u);
  }
}

void BlockGatherer::release(size_t unit) {
  const std::lock_guard<std::mutex> lock(mutex_);
  release_unlocked(unit);
}

void BlockGatherer::release_all() {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (size_t u = 0; u < units_.size(); ++u) release_unlocked(u);
}

void BlockGatherer::prefetch_next_forward() {
  const std::lock_guard<std::mutex> lock(mutex_);
  gather(outside_);
  gather(first_unit());
}

// Forward: the parameters outside the blocks for the whole pass, and the first block's gather
// started alongside (unless a step's end started both).
void BlockGatherer::begin_forward() {
  const std::lock_guard<std::mutex> lock(mutex_);
  gather(outside_);
  gather(first_unit());
  wait(outside_);
}

void BlockGatherer::before_block(size_t block) {
  const std::lock_guard<std::mutex> lock(mutex_);
  gather(unit_of_block_[block]);
  gather(other_unit(block, +1));  // prefetched while this block computes
  wait(unit_of_block_[block]);
}

// Released after the last of its blocks ran; when a backward will run through the block, gathered
// again just before. The last unit of the forward is kept when a backward follows, which needs it
// first (FSDP does not reshard it either).
void BlockGatherer::after_block(size_t block, const at::Tensor& output) {
  const bool backward_follows = c10::GradMode::is_enabled() && output.requires_grad();
  if (backward_follows) output.register_hook([this, block](const at::Tensor&) { before_backward(block); });
  const std::lock_guard<std::mutex> lock(mutex_);
  const std::optional<size_t> unit = unit_of_block_[block];
  const bool last_of_unit = block + 1 == unit_of_block_.size() || unit_of_block_[block + 1] != unit;
  const bool needed_next = backward_follows && !other_unit(block, +1);
  if (unit && last_of_unit && !needed_next) release_unlocked(*unit);
}

// Without gradients no backward follows: nothing stays gathered.
void BlockGatherer::end_forward() {
  if (!c10::GradMode::is_enabled()) release_all();
}

void BlockGatherer::before_backward(size_t block) {
  const std::lock_guard<std::mutex> lock(mutex_);
  gather(unit_of_block_[block]);
  gather(other_unit(block, -1));  // backward runs the blocks last to first
  wait(unit_of_block_[block]);
}

void BlockGatherer::gather(std::optional<size_t> u) {
  if (!u || units_[*u].gathered) return;
  Unit& unit = units_[*u];
  // In place (the rank's chunk of the whole buffer is the input): MPI's in-place all-gather
  // allocates no temporary of the whole size, as some of its out-of-place algorithms do. The
  // memory is made, and the chunk put in it, when the gather starts (Note [Memory made when the
  // gather starts] in src/comm/mpi_communicator.cpp); nothing reads the unit before wait(u).
  // Everything the fill uses is owned by it, the pool's shelf too (a copy of the handle): a job
  // ending on an error destroys this gatherer while the MPI worker, let go, may still run it.
  const at::Tensor whole = unit.whole;
  const at::Tensor shard = unit.shard;
  const std::int64_t offset = shard.numel() * comm_.rank();
  unit.gathering = comm_.allgather_filled(unit.whole, [whole, shard, offset, pool = pool_]() mutable {
    allocate_memory(whole, pool);
    whole.narrow(0, offset, shard.numel()).copy_(shard);
  });
  unit.gathered = true;
}

void BlockGatherer::wait(std::optional<size_t> u) {
  if (!u || !units_[*u].gathering) return;
  units_[*u].gathering->wait();
  units_[*u].gathering.reset();
}

void BlockGatherer::release_unlocked(size_t u) {
  Unit& unit = units_[u];
  if (!unit.gathered) return;
  wait(u);  // the collective writes into the memory until it completes
  model::release_memory(unit.whole);
  unit.gathered = false;
}

std::optional<size_t> BlockGatherer::first_unit() const {
  if (unit_of_block_.empty()) return std::nullopt;
  return unit_of_block_.front() ? unit_of_block_.front() : other_unit(0, +1);
}

std::optional<size_t> BlockGatherer::other_unit(size_t block, int direction) const {
  const std::optional<size_t> own = unit_of_block_[block];
  for (auto b = static_cast<std::ptrdiff_t>(block) + direction;
       b >= 0 && b < static_cast<std::ptrdiff_t>(unit_of_block_.size()); b += direction) {
    const std::optional<size_t> unit = unit_of_block_[static_cast<size_t>(b)];
    if (unit && unit != own) return unit;
  }
  return std::nullopt;
}

}  // namespace hpctrain::sharding
