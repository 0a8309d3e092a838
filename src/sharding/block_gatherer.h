// dist.zero_stage=3's parameters (docs/distributed.md, "Sharding (ZeRO)"). The trainable
// parameters fall into units: one per block of the model (model.h), or per run of consecutive
// small blocks, and one for those outside every block. Each unit is one flat buffer, padded to a multiple of the world size, of which this
// rank keeps only its chunk (shard()); the module's parameters are views of the whole buffer, whose
// memory exists only while the unit is gathered (Note [Parameters without memory]): a block's from
// just before its forward to just after, and again from just before its backward until all its
// gradients are in (GradSync's on_filled calls release()); the rest's for a whole forward and
// backward. The next block's gather starts before the current block runs, forward and backward.
// Private to src/sharding. Depends on comm, ddp's bucket type and model's BlockHooks.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/ddp/bucket_plan.h"
#include "hpctrain/ddp/buffer_pool.h"
#include "hpctrain/model/model.h"

namespace hpctrain::sharding {

// Which trainable parameters make each unit. The units are GradSync's buckets, so in the order
// backward fills them: the blocks last to first, then the parameters outside every block.
struct UnitPlan {
  std::vector<ddp::Bucket> units;                    // parameter indices, in their order in the buffer
  std::vector<std::optional<size_t>> unit_of_block;  // none: a block with no trainable parameter
  std::optional<size_t> outside;                     // the unit of the parameters outside every block
};

// `parameters`: the trainable ones, in the module's order. Consecutive blocks share a unit until it
// holds `unit_bytes` (dist.bucket_mb).
UnitPlan plan_units(model::Model& model, const std::vector<at::Tensor>& parameters, std::int64_t unit_bytes);

class BlockGatherer final : public model::BlockHooks {
 public:
  // Cuts `parameters` (whole, and equal on every rank) into `plan`'s units and keeps this rank's
  // chunk of each: from here on they are whole only while gathered.
  // Gathered units take their memory from `pool`, which must outlive the gatherer.
  // A parameter without memory (model/parameter_memory.h) takes its values from `deferred`'s
  // sources, unit by unit, whose mapped pages are dropped once read; `deferred` is cleared.
  BlockGatherer(comm::Communicator& comm, const std::vector<at::Tensor>& parameters, const UnitPlan& plan,
                ddp::BufferPool& pool, model::DeferredWeights& deferred);
  ~BlockGatherer() override;

  // This rank's chunk of unit `unit`: the parameters' values it owns (the padding stays zero).
  const at::Tensor& shard(size_t unit) const { return units_[unit].shard; }
  std::int64_t shard_bytes() const;

  // Collective: every unit gathered, whole on every rank.
  void gather_all();
  // After the whole parameters were changed (a checkpoint read into them): this rank's chunk of
  // every gathered unit becomes its shard, and every unit is released.
  void keep_changes_and_release_all();
  void release(size_t unit);
  void release_all();
  // Collective: starts gathering what the next forward needs first (the parameters outside the
  // blocks and the first block's unit), while the ranks are still together after a step.
  void prefetch_next_forward();

  void begin_forward() override;
  void before_block(size_t block) override;
  void after_block(size_t block, const at::Tensor& output) override;
  void end_forward() override;

 private:
  struct Unit {
    at::Tensor whole;  // every rank's chunk; the parameters are views of it
    at::Tensor shard;  // this rank's chunk, always held
    std::unique_ptr<comm::Work> gathering;
    bool gathered = false;  // whole has memory (its gather may still be in flight)
  };

  void before_backward(size_t block);
  // Starts unit u's gather unless it is gathered; `wait` waits for it.
  void gather(std::optional<size_t> unit);
  void wait(std::optional<size_t> unit);
  void release_unlocked(size_t unit);
  // The unit of the forward's first block that has one.
  std::optional<size_t> first_unit() const;
  // The unit of the nearest block after (`direction` +1) or before (-1) `block` that has one other
  // than `block`'s.
  std::optional<size_t> other_unit(size_t block, int direction) const;

  comm::Communicator& comm_;
  ddp::BufferPool& pool_;
  std::vector<Unit> units_;
  std::vector<std::optional<size_t>> unit_of_block_;
  std::optional<size_t> outside_;
  std::mutex mutex_;  // hooks run on autograd's threads
};

}  // namespace hpctrain::sharding
