#include "hpctrain/ddp/grad_sync.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/trace.h"
#include "hpctrain/ddp/bucket_plan.h"
#include "hpctrain/ddp/buffer_pool.h"
#include "hpctrain/ddp/mapped_memory.h"
#include "hpctrain/ddp/shard_plan.h"

namespace hpctrain::ddp {

namespace {

// Calls `on_accumulated` after autograd has added a backward's gradient into a parameter's .grad().
class AfterAccumulation final : public torch::autograd::FunctionPostHook {
 public:
  explicit AfterAccumulation(std::function<void()> on_accumulated) : on_accumulated_(std::move(on_accumulated)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    on_accumulated_();
    return outputs;
  }

 private:
  std::function<void()> on_accumulated_;
};

// Calls `before` before autograd adds a backward's gradient into a parameter's .grad().
class BeforeAccumulation final : public torch::autograd::FunctionPreHook {
 public:
  explicit BeforeAccumulation(std::function<void()> before) : before_(std::move(before)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& gradients) override {
    before_();
    return gradients;
  }

 private:
  std::function<void()> before_;
};

// `buckets` as given, after checking that they hold every parameter once, with their sizes.
std::vector<Bucket> checked_buckets(std::vector<Bucket> buckets, const std::vector<std::int64_t>& numels) {
  std::vector<char> seen(numels.size(), 0);
  for (Bucket& bucket : buckets) {
    bucket.numel = 0;
    for (const size_t i : bucket.parameters) {
      HT_CHECK(i < numels.size() && seen[i] == 0, "given buckets hold a parameter twice or one that is not there");
      seen[i] = 1;
      bucket.numel += numels[i];
    }
  }
  HT_CHECK(std::find(seen.begin(), seen.end(), 0) == seen.end(), "given buckets leave a parameter out");
  return buckets;
}

}  // namespace

// Note [Gradients in buckets]: each parameter's .grad() is its slot in its bucket's flat buffer
// (PyTorch DDP's gradient_as_bucket_view), so autograd accumulates every backward's
// gradient straight into the bucket, the bucket is averaged in place, and the optimizer reads the
// averages where they are: no copy into the bucket and none back. A bucket is started from a
// hook on the parameter's gradient accumulator (AccumulateGrad), which runs after the gradient
// was added; a hook on the tensor would run before. Gradients are put in their slots when
// GradSync is made and again before each backward, for an optimizer whose zero_grad() drops them
// (libtorch 2's set_to_none) instead of zeroing them. A .grad() found elsewhere (a frozen
// parameter's, or one replaced) is copied into its slot at launch and the average copied back.
//
// Sharded (ZeRO 1): the same buckets, padded with zeros to a multiple of the world size, are
// reduce-scattered in place: each rank's chunk of the bucket becomes its shard, the average of
// that chunk; the rest of the bucket, and so the .grad() slots, are left undefined until the next
// step's zeroing (the padding stays zero: it is only ever the result of adding zeros).
// Released (ZeRO 2): no bucket exists between steps. A hook before accumulation allocates a bucket
// when the first of its gradients arrives and puts every one of its parameters' .grad() in its
// slot, so autograd accumulates into the bucket as at stage 0; at launch the slots are dropped
// from the parameters, and the bucket is freed as soon as its reduce-scatter is seen complete (at
// a later launch, or in average_gradients()).

struct GradSync::State {
  comm::Communicator& comm;
  std::vector<at::Tensor> parameters;
  GradSyncOptions options;
  std::vector<Bucket> plan;
  std::vector<at::Tensor> buffers;       // bucket -> its flat buffer
  std::vector<at::Tensor> wire;          // bucket -> what travels (compression), or its buffer
  std::vector<std::int64_t> padded;      // bucket -> its buffer's length (a multiple of size() when sharded)
  std::vector<at::Tensor> shards;        // bucket -> this rank's averaged chunk (sharded)
  std::vector<at::Tensor> shard_wire;    // bucket -> the chunk as it arrives (compression), or its shard
  std::vector<char> finished;            // bucket -> its reduction was waited for this step
  std::vector<size_t> bucket_of;         // parameter -> bucket
  std::vector<std::int64_t> offset_of;   // parameter -> offset in its bucket's buffer
  std::vector<const void*> slot_data;    // parameter -> where its slot starts
  std::vector<char> filled;              // parameter -> has a gradient in its slot this step
  std::vector<size_t> missing;           // bucket -> parameters still to come in the last backward
  std::vector<std::unique_ptr<comm::Work>> works;  // bucket -> its reduction, once started
  size_t next_launch = 0;                // buckets start strictly in order
  bool last_backward = false;
  bool alone = false;  // one rank: the mean over ranks is the gradient itself, nothing to do
  bool reported_unused = false;
  std::vector<size_t> unused;
  // parameter -> its gradient accumulator and the key of our hook on it (null: no hook). Held, so
  // autograd keeps the accumulator, and our hook, from one backward to the next.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<std::uintptr_t> hook_keys;
  std::vector<const torch::autograd::FunctionPreHook*> pre_hooks;  // released buckets' allocators
  std::mutex mutex;                      // hooks run on autograd's threads

  State(comm::Communicator& c, std::vector<at::Tensor> p, GradSyncOptions o)
      : comm(c), parameters(std::move(p)), options(o) {}

  bool sharded() const { return options.reduction != Reduction::kAllreduce; }
  bool releases() const { return options.reduction == Reduction::kReduceScatterAndRelease; }
  bool compresses(const at::Tensor& like) const {
    return options.wire_dtype != c10::ScalarType::Undefined && options.wire_dtype != like.scalar_type();
  }

  at::Tensor slot(size_t i) const {
    return buffers[bucket_of[i]].narrow(0, offset_of[i], parameters[i].numel());
  }

  // Whether parameter i's .grad() is its slot (Note [Gradients in buckets]).
  bool grad_in_slot(size_t i) const {
    const at::Tensor& grad = parameters[i].grad();
    return slot_data[i] != nullptr && grad.defined() && grad.data_ptr() == slot_data[i];
  }

  void put_gradients_in_slots() {
    if (releases()) return;  // a released bucket's slots are put there when it is allocated
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (accumulators[i] && !grad_in_slot(i)) put_in_slot(i);
    }
  }

  // Parameter i's .grad() becomes its slot, holding the gradient it held (or zeros).
  void put_in_slot(size_t i) {
    c10::NoGradGuard no_grad;
    const at::Tensor& grad = parameters[i].grad();
    // The slot's memory, but not an autograd view of the bucket: an optimizer's zero_grad()
    // may detach_() a gradient, which libtorch refuses for a view.
    const at::Tensor shaped = slot(i).view(parameters[i].sizes());
    at::Tensor in_slot = at::empty({0}, shaped.options())
                             .set_(shaped.storage(), shaped.storage_offset(), shaped.sizes(), shaped.strides());
    if (grad.defined()) {
      in_slot.copy_(grad);
    } else {
      in_slot.zero_();
    }
    parameters[i].mutable_grad() = in_slot;
  }

  // A released bucket, allocated with its parameters' gradients in their slots and its padding
  // zero. From the pool when there is one (buffer_pool.h): freshly mapped memory for every bucket
  // of every step slowed stage 2's steps 2.4x at 4 ranks on 2 cores (page faults), and the heap
  // keeps freed buckets resident and fragmented.
  void allocate(size_t b) {
    const auto like = parameters.front().options();
    buffers[b] = options.pool != nullptr ? options.pool->empty(padded[b], like) : at::empty({padded[b]}, like);
    buffers[b].narrow(0, plan[b].numel, padded[b] - plan[b].numel).zero_();
    for (const size_t i : plan[b].parameters) {
      slot_data[i] = slot(i).data_ptr();
      put_in_slot(i);
    }
  }

  // Before autograd adds parameter i's gradient of this backward into its .grad().
  void before_accumulation(size_t i) {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!buffers[bucket_of[i]].defined()) allocate(bucket_of[i]);
  }

  // After autograd added parameter i's gradient of this backward into its .grad().
  void on_accumulated(size_t i) {
    const std::lock_guard<std::mutex> lock(mutex);
    filled[i] = 1;
    const size_t b = bucket_of[i];
    if (missing[b] == 0 || --missing[b] > 0) return;
    if (options.on_filled) options.on_filled(b);
    if (last_backward && options.overlap) launch_ready();
  }

  void launch_ready() {
    while (next_launch < plan.size() && missing[next_launch] == 0) launch(next_launch++);
  }

  void launch(size_t b) {
    c10::NoGradGuard no_grad;
    if (releases() && !buffers[b].defined()) allocate(b);  // no parameter of it got a gradient
    for (const size_t i : plan[b].parameters) {
      if (!grad_in_slot(i)) {  // not what backward accumulated there: what .grad() holds, or zeros
        const at::Tensor& grad = parameters[i].grad();
        if (grad.defined()) {
          slot(i).copy_(grad.reshape({-1}));
        } else {
          slot(i).zero_();
        }
      }
      if (releases()) {  // the bucket alone holds it now, until reduced
        parameters[i].mutable_grad().reset();
        slot_data[i] = nullptr;
      }
    }
    if (releases()) {
      wire[b] = compresses(buffers[b]) ? buffers[b].to(options.wire_dtype) : buffers[b];
      if (!wire[b].is_same(buffers[b])) buffers[b].reset();
    } else if (!wire[b].is_same(buffers[b])) {
      wire[b].copy_(buffers[b]);
    }
    const trace::BucketScope labelled(static_cast<std::int64_t>(b));  // the comm thread's span names it
    works[b] = sharded() ? comm.reduce_scatter(wire[b], shard_wire[b], comm::ReduceOp::kAvg)
                         : comm.allreduce(wire[b], comm::ReduceOp::kAvg);
    if (releases()) {
      // The Work alone holds the bucket now and gives it back once reduced (communicator.h),
      // for the next unit's gather to take (Note [Memory made when the gather starts]).
      buffers[b].reset();
      wire[b].reset();
      finish_completed(b);
    }
  }

  // Waits for bucket b's reduction and puts its result in place.
  void finish(size_t b) {
    works[b]->wait();
    works[b].reset();  // a Work may hold its tensors: released with it
    if (sharded()) {
      if (!shard_wire[b].is_same(shards[b])) shards[b].copy_(shard_wire[b]);
    } else if (!wire[b].is_same(buffers[b])) {
      buffers[b].copy_(wire[b]);
    }
    finished[b] = 1;
  }

  // Released buckets: those before `b` are finished (their reductions waited for), so a rank
  // holds at most two buckets of full gradients: `b` in flight and the next one filling. Bucket
  // b-1 had all of b's backward to complete in; a third bucket in flight cost stage 3 a fifth
  // gathered block's worth of memory and gained no measurable time.
  void finish_completed(size_t b) {
    for (size_t j = 0; j < b; ++j) {
      if (!finished[j]) finish(j);
    }
  }
};

GradSync::GradSync(comm::Communicator& comm, std::vector<at::Tensor> parameters, GradSyncOptions options)
    : state_(std::make_unique<State>(comm, std::move(parameters), options)) {
  State& s = *state_;
  HT_CHECK(!s.parameters.empty(), "no parameters to synchronize");
  std::vector<std::int64_t> numels;
  for (const auto& p : s.parameters) {
    HT_CHECK(p.scalar_type() == s.parameters.front().scalar_type(), "mixed parameter dtypes");
    numels.push_back(p.numel());
  }
  const auto element = static_cast<std::int64_t>(s.parameters.front().element_size());
  s.plan = options.buckets.empty() ? plan_buckets(numels, std::max<std::int64_t>(1, options.bucket_bytes / element))
                                   : checked_buckets(options.buckets, numels);
  s.bucket_of.resize(s.parameters.size());
  s.offset_of.resize(s.parameters.size());
  for (size_t b = 0; b < s.plan.size(); ++b) {
    std::int64_t offset = 0;
    for (const size_t i : s.plan[b].parameters) {
      s.bucket_of[i] = b;
      s.offset_of[i] = offset;
      offset += numels[i];
    }
    const auto like = s.parameters.front().options();
    const auto wire_like = like.dtype(s.compresses(s.parameters.front()) ? options.wire_dtype : like.dtype().toScalarType());
    s.padded.push_back(s.sharded() ? padded_numel(s.plan[b].numel, comm.size()) : s.plan[b].numel);
    // Zeros: the padding of a sharded bucket is never written and must add nothing.
    s.buffers.push_back(s.releases() ? at::Tensor() : at::zeros({s.padded[b]}, like));
    s.wire.push_back(s.releases() || !s.compresses(s.parameters.front()) ? s.buffers.back()
                                                                         : at::empty({s.padded[b]}, wire_like));
    if (s.sharded()) {
      // Stage 1 reduces in place: the rank's chunk of the bucket is its shard (the bucket's other
      // chunks are not read again before the next step zeroes them). Stage 2's shard outlives
      // the bucket.
      const std::int64_t chunk = s.padded[b] / comm.size();
      const std::int64_t mine = chunk * comm.rank();
      const bool compress = s.compresses(s.parameters.front());
      if (s.releases()) {
        s.shards.push_back(mapped_zeros(chunk, like));  // long-lived: kept out of the step's heap
        s.shard_wire.push_back(compress ? at::empty({chunk}, wire_like) : s.shards.back());
      } else {
        s.shards.push_back(s.buffers.back().narrow(0, mine, chunk));
        s.shard_wire.push_back(compress ? s.wire.back().narrow(0, mine, chunk) : s.shards.back());
      }
    }
  }
  s.filled.assign(s.parameters.size(), 0);
  s.missing.assign(s.plan.size(), 0);
  s.works.resize(s.plan.size());
  s.finished.assign(s.plan.size(), 0);
  s.accumulators.resize(s.parameters.size());
  s.hook_keys.assign(s.parameters.size(), 0);
  s.pre_hooks.assign(s.parameters.size(), nullptr);
  s.alone = comm.size() == 1 && !s.sharded();
  for (size_t i = 0; i < s.parameters.size() && !s.alone; ++i) {
    if (!s.parameters[i].requires_grad()) continue;  // frozen: never gets a gradient
    State* state = state_.get();
    s.accumulators[i] = torch::autograd::impl::grad_accumulator(s.parameters[i]);
    HT_CHECK(s.accumulators[i] != nullptr, "a trainable parameter has no gradient accumulator");
    s.hook_keys[i] = s.accumulators[i]->add_post_hook(
        std::make_unique<AfterAccumulation>([state, i] { state->on_accumulated(i); }));
    if (s.releases()) {
      auto allocator = std::make_unique<BeforeAccumulation>([state, i] { state->before_accumulation(i); });
      s.pre_hooks[i] = allocator.get();
      s.accumulators[i]->add_pre_hook(std::move(allocator));
    }
  }
  for (size_t i = 0; i < s.parameters.size(); ++i) {
    s.slot_data.push_back(s.releases() ? nullptr : s.slot(i).data_ptr());
  }
  s.put_gradients_in_slots();
}

GradSync::~GradSync() {
  for (size_t i = 0; i < state_->parameters.size(); ++i) {
    if (!state_->accumulators[i]) continue;
    state_->accumulators[i]->del_post_hook(state_->hook_keys[i]);
    auto& pre_hooks = state_->accumulators[i]->pre_hooks();  // libtorch has no del_pre_hook
    pre_hooks.erase(std::remove_if(pre_hooks.begin(), pre_hooks.end(),
                                   [&](const auto& hook) { return hook.get() == state_->pre_hooks[i]; }),
                    pre_hooks.end());
  }
}

void GradSync::begin_backward(bool last_micro_batch) {
  State& s = *state_;
  const std::lock_guard<std::mutex> lock(s.mutex);
  s.put_gradients_in_slots();
  s.last_backward = last_micro_batch;
  for (size_t b = 0; b < s.plan.size(); ++b) s.missing[b] = s.plan[b].parameters.size();
}

void GradSync::average_gradients() {
  State& s = *state_;
  if (s.alone) return;
  {
    const std::lock_guard<std::mutex> lock(s.mutex);
    while (s.next_launch < s.plan.size()) s.launch(s.next_launch++);
  }
  c10::NoGradGuard no_grad;
  for (size_t b = 0; b < s.plan.size(); ++b) {
    if (!s.finished[b]) s.finish(b);
  }
  s.unused.clear();
  for (size_t i = 0; i < s.parameters.size(); ++i) {
    if (!s.filled[i]) s.unused.push_back(i);
    if (s.sharded() || s.grad_in_slot(i)) continue;  // in the shards, or averaged in place
    at::Tensor averaged = s.slot(i).view(s.parameters[i].sizes());
    if (s.parameters[i].grad().defined()) {
      s.parameters[i].mutable_grad().copy_(averaged);
    } else {
      s.parameters[i].mutable_grad() = averaged.clone();
    }
  }
  if (!s.unused.empty() && !s.reported_unused && s.options.warn_unused) {
    s.reported_unused = true;
    log::warn("{} of {} parameters got no gradient in a step (first: index {}); their current "
              "gradients (or zeros) were averaged in",
              s.unused.size(), s.parameters.size(), s.unused.front());
  }
  // The next step starts empty.
  std::fill(s.filled.begin(), s.filled.end(), 0);
  std::fill(s.missing.begin(), s.missing.end(), 0);
  for (auto& work : s.works) work.reset();
  std::fill(s.finished.begin(), s.finished.end(), 0);
  s.next_launch = 0;
  s.last_backward = false;
}

std::int64_t GradSync::numel() const {
  std::int64_t total = 0;
  for (const auto& b : state_->plan) total += b.numel;
  return total;
}

size_t GradSync::bucket_count() const { return state_->plan.size(); }

const std::vector<Bucket>& GradSync::buckets() const { return state_->plan; }

const at::Tensor& GradSync::shard(size_t b) const {
  HT_CHECK(state_->sharded() && b < state_->shards.size(), "a shard of a sharded reduction");
  return state_->shards[b];
}

std::int64_t GradSync::gradient_bytes() const {
  const State& s = *state_;
  std::int64_t bytes = 0;
  const auto add = [&bytes](const at::Tensor& t) { bytes += t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0; };
  for (size_t b = 0; b < s.plan.size(); ++b) {
    add(s.buffers[b]);
    if (!s.wire[b].is_same(s.buffers[b])) add(s.wire[b]);
    if (!s.releases()) continue;  // stage 1's shards are chunks of the buckets
    add(s.shards[b]);
    if (!s.shard_wire[b].is_same(s.shards[b])) add(s.shard_wire[b]);
  }
  return bytes;
}

std::vector<size_t> GradSync::last_unused() const { return state_->unused; }

namespace {

// One message: `group` packed, broadcast, and unpacked.
void broadcast_packed(comm::Communicator& comm, const std::vector<at::Tensor>& group, int root) {
  std::vector<at::Tensor> flat_views;
  for (const auto& t : group) flat_views.push_back(t.detach().reshape({-1}));
  at::Tensor packed = at::cat(flat_views);
  comm.broadcast(packed, root)->wait();
  std::int64_t offset = 0;
  c10::NoGradGuard no_grad;
  for (const auto& t : group) {
    t.detach().copy_(packed.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

void broadcast_tensors(comm::Communicator& comm, const std::vector<at::Tensor>& tensors, int root) {
  // Messages of up to 16 MiB, so the packed copy never approaches a large model's size.
  constexpr std::int64_t kMessageBytes = std::int64_t{16} << 20;
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> message;
    std::int64_t bytes = 0;
    for (const auto& t : group) {
      const auto size = static_cast<std::int64_t>(t.nbytes());
      if (!message.empty() && bytes + size > kMessageBytes) {
        broadcast_packed(comm, message, root);
        message.clear();
        bytes = 0;
      }
      message.push_back(t);
      bytes += size;
    }
    if (!message.empty()) broadcast_packed(comm, message, root);
  }
}

std::vector<int> ranks_differing_from_root(comm::Communicator& comm,
                                           const std::vector<at::Tensor>& tensors, c10::Device device) {
  c10::NoGradGuard no_grad;
  // Wrapping int64 sums of the elements' words (32-bit, or 16-bit for a bf16 LoRA base): any
  // changed bit changes the plain sum, and the position weights catch values that moved.
  const auto options = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor plain = at::zeros({}, options);
  at::Tensor weighted = at::zeros({}, options);
  std::int64_t position = 0;
  for (const auto& t : tensors) {
    HT_CHECK(t.element_size() == 4 || t.element_size() == 2, "replica check: tensors must have 2- or 4-byte elements");
    const at::ScalarType word = t.element_size() == 2 ? at::kShort : at::kInt;
    const at::Tensor words = t.detach().contiguous().view(word).reshape({-1}).to(at::kLong);
    plain.add_(words.sum());
    weighted.add_((words * at::arange(position + 1, position + 1 + words.numel(), options)).sum());
    position += words.numel();
  }
  const at::Tensor fingerprint = at::stack({plain, weighted});
  at::Tensor root = fingerprint.clone();
  comm.broadcast(root, 0)->wait();
  std::vector<double> differs(static_cast<size_t>(comm.size()), 0.0);
  differs[static_cast<size_t>(comm.rank())] = root.equal(fingerprint) ? 0.0 : 1.0;
  const std::vector<double> all = sum_over_ranks(comm, differs, device);
  std::vector<int> out;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] > 0.5) out.push_back(static_cast<int>(r));
  }
  return out;
}

std::vector<double> sum_over_ranks(comm::Communicator& comm, const std::vector<double>& values,
                                   c10::Device device) {
  const auto n = static_cast<std::int64_t>(values.size());
  // A copy (also on the CPU), so the collective never writes into `values`.
  at::Tensor sums = at::from_blob(const_cast<double*>(values.data()), {n}, at::kDouble)
                        .to(device, at::kDouble, /*non_blocking=*/false, /*copy=*/true);
  comm.allreduce_blocking(sums, comm::ReduceOp::kSum);
  sums = sums.cpu();
  return {sums.data_ptr<double>(), sums.data_ptr<double>() + n};
}

}  // namespace hpctrain::ddp
