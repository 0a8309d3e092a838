// Keeps replicas identical: averages gradients across ranks, and copies tensors (initial
// parameters, BatchNorm buffers) from one rank to all.
//
// GradSync is the reducer (docs/distributed.md): gradients are grouped into buckets of
// dist.bucket_mb in reverse parameter order (bucket_plan.h), every parameter's .grad() being its
// slot in its bucket's flat buffer, into which autograd accumulates (Note [Gradients in buckets]);
// a hook after each accumulation counts the gradients in, and in the step's last backward a
// bucket whose gradients are all in is reduced at once (overlap) while backward goes on. Buckets
// start strictly in order on every rank, so all ranks issue the same collectives in the same
// order. average_gradients() waits for them; the averages are then in each .grad().
// Sharded (ZeRO stages 1 to 3, Reduction below): each bucket is padded to a multiple of the
// world size and reduce-scattered instead, so each rank receives the average of its chunk only
// (shard_plan.h says which parameters' elements that is), in shard(b).
// Depends on core, comm and ATen; never on models or the trainer.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "hpctrain/ddp/bucket_plan.h"

namespace hpctrain::comm {
class Communicator;
}  // namespace hpctrain::comm

namespace hpctrain::ddp {

class BufferPool;

// What a bucket's reduction gives each rank.
enum class Reduction {
  kAllreduce,      // the whole bucket's average, in every parameter's .grad() (replicated)
  kReduceScatter,  // its chunk's average in shard(b), in place; .grad() undefined after (ZeRO 1)
  // As kReduceScatter, and the bucket's full gradients exist only from its launch until its
  // reduce-scatter completes: autograd's .grad() tensors are copied into the bucket at launch and
  // dropped, the bucket freed once reduced (ZeRO 2 and 3).
  kReduceScatterAndRelease,
};

struct GradSyncOptions {
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  bool overlap = true;      // false: every bucket starts in average_gradients(), after backward
  bool warn_unused = true;  // log the first step in which a parameter got no gradient
  // Buckets travel in this dtype (at::kHalf or at::kBFloat16 halve the bytes; the buckets and
  // the accumulation over micro-batches stay float32); Undefined: as the parameters are.
  c10::ScalarType wire_dtype = c10::ScalarType::Undefined;
  Reduction reduction = Reduction::kAllreduce;
  // The buckets, in the order they are reduced, every parameter in exactly one; empty: planned
  // from bucket_bytes (bucket_plan.h). ZeRO stage 3 gives one bucket per unit of blocks of the
  // model (src/sharding/block_gatherer.h).
  std::vector<Bucket> buckets;
  // Called with a bucket's index when all its parameters got their gradient in a backward (any
  // of a step's backwards), on autograd's thread: stage 3 frees the block's gathered parameters.
  std::function<void(std::size_t)> on_filled;
  // Where released buckets (kReduceScatterAndRelease) get their memory, reused from step to step;
  // null: the device's allocator. Must outlive the GradSync.
  BufferPool* pool = nullptr;
};

class GradSync {
 public:
  // `parameters`: the trainable tensors whose gradients are averaged, in a fixed order that is the
  // same on every rank. All must share one floating dtype and device.
  GradSync(comm::Communicator& comm, std::vector<at::Tensor> parameters, GradSyncOptions options = {});
  ~GradSync();  // removes the hooks
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Before each backward of a step. `last_micro_batch`: this backward completes the step's
  // gradients, so its buckets are reduced (as they fill, with overlap). Earlier backwards of the
  // step (gradient accumulation) only add into the buckets: no communication, like DDP's no_sync.
  void begin_backward(bool last_micro_batch);

  // Collective: starts the buckets not started yet, waits for all, and replaces every parameter's
  // gradient by its mean over all ranks (summed over the step's backwards). With one rank there
  // is nothing to average: no hooks, no buckets, and this returns at once. A parameter that got
  // no gradient in the step contributes its current .grad(), or zeros if it has none; such
  // parameters are reported once (log warning). Then the next step begins.
  void average_gradients();

  std::int64_t numel() const;
  size_t bucket_count() const;
  const std::vector<Bucket>& buckets() const;
  // Sharded reductions: this rank's chunk of bucket `b` (padded_numel / size() elements), holding
  // its average after average_gradients(): at stage 1 the bucket's own chunk, at stage 2 a
  // buffer of its own. The padding's elements stay zero.
  const at::Tensor& shard(size_t b) const;
  // The bytes of gradient buffers held now: buckets (those in flight, when released) and shards.
  std::int64_t gradient_bytes() const;
  // Parameters (indices) that received no gradient in the last step.
  std::vector<size_t> last_unused() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// Collective: every rank's `tensors` get the values of rank `root`'s (grouped by dtype into
// messages of up to 16 MiB). Shapes and order must match across ranks.
void broadcast_tensors(comm::Communicator& comm, const std::vector<at::Tensor>& tensors, int root);

// Collective: the ranks whose `tensors` differ from rank 0's, bit for bit (empty when every
// replica is identical). Compares a 64-bit fingerprint of the bytes of every tensor (two sums of
// their 32-bit words, one weighted by position), so it costs two small collectives, not a copy.
// Tensors are float32 or of another 4-byte dtype, on `device`.
std::vector<int> ranks_differing_from_root(comm::Communicator& comm,
                                           const std::vector<at::Tensor>& tensors, c10::Device device);

// Collective: the element-wise sums of every rank's `values`, as float64, through one allreduce on
// `device` (the device the communicator carries: a CUDA device for NCCL).
std::vector<double> sum_over_ranks(comm::Communicator& comm, const std::vector<double>& values,
                                   c10::Device device);

}  // namespace hpctrain::ddp
