#include "mpi_communicator.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "bootstrap_impl.h"
#include "hpctrain/comm/flight_recorder.h"
#include "hpctrain/core/activity.h"
#include "hpctrain/core/trace.h"
#include "mpi_check.h"
#include "rank_watch.h"

namespace hpctrain::comm {
namespace {

// MPI has no 16-bit floating types: they travel as 2-byte opaque elements summed by our own op,
// in float32 per addition (gradient compression, docs/distributed.md).
template <typename T>
void sum_16bit(void* in, void* inout, int* count, MPI_Datatype*) {
  const auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = static_cast<T>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

struct SixteenBit {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op half_sum = MPI_OP_NULL;
  MPI_Op bfloat16_sum = MPI_OP_NULL;
};

MPI_Datatype mpi_type(const at::Tensor& tensor, const SixteenBit& sixteen) {
  switch (tensor.scalar_type()) {
    case at::kHalf:
    case at::kBFloat16: return sixteen.type;
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kLong: return MPI_INT64_T;
    case at::kInt: return MPI_INT32_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kChar: return MPI_INT8_T;
    default:
      throw CommError(std::string("MPI collectives do not support dtype ") +
                      c10::toString(tensor.scalar_type()));
  }
}

void check_tensor(const at::Tensor& tensor, const char* op) {
  if (!tensor.is_contiguous()) throw CommError(std::string("MPI ") + op + " needs a contiguous tensor");
  if (tensor.numel() > std::numeric_limits<int>::max()) {
    throw CommError(std::string("MPI ") + op + " of more than INT_MAX elements");
  }
}

bool on_host(const at::Tensor& tensor) { return tensor.device().is_cpu(); }

// The two segments a ring reduce-scatter carries, kept for the next one (the communicator's
// worker thread alone uses them).
struct RingScratch {
  at::Tensor carried;   // the partial sum sent on
  at::Tensor arriving;  // the partial sum received

  void fit(std::int64_t count, const at::TensorOptions& options) {
    if (carried.defined() && carried.numel() >= count && carried.dtype() == options.dtype()) return;
    carried = at::empty({count}, options);
    arriving = at::empty({count}, options);
  }
};

// Note [Ring reduce-scatter]: Open MPI 4.1's MPI_Reduce_scatter_block (basic_linear, its fixed
// choice) reduces the whole buffer to rank 0 and scatters it from there: rank 0 mallocs two
// temporaries of the whole buffer's size for every bucket, which stay in the heap and made it
// every sharded run's largest rank, and it does every addition. In a ring, as NCCL's, each rank
// adds one chunk per hop: in W-1 hops chunk c travels from rank c+1 around to rank c, each rank
// adding its own part. The chunks go around in segments of 1 MiB, so a rank holds two segments
// besides the input. `input` (W chunks of `count`) is only read; chunk `rank`'s sum is written to
// `output`, which may be that chunk of `input`. At W=2 each sum is the two ranks' parts added
// once, as by any reduction; at larger W the order of additions is the ring's.
void ring_reduce_scatter(const at::Tensor& input, const at::Tensor& output, MPI_Datatype type, MPI_Op sum,
                         MPI_Comm comm, int rank, int size, RingScratch& scratch) {
  constexpr int kRingTag = 7341;
  const std::int64_t count = output.numel();
  const at::Tensor flat_output = output.view({-1});
  const auto chunk = [&](int c) { return input.view({-1}).narrow(0, ((c % size) + size) % size * count, count); };
  if (size == 1) {
    if (output.data_ptr() != input.data_ptr()) flat_output.copy_(chunk(0));
    return;
  }
  const std::int64_t segment = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / input.element_size());
  scratch.fit(std::min(segment, count), input.options());
  const int next = (rank + 1) % size;
  const int previous = (rank + size - 1) % size;
  for (std::int64_t start = 0; start < count; start += segment) {
    const std::int64_t length = std::min(segment, count - start);
    at::Tensor carried = scratch.carried.narrow(0, 0, length);
    at::Tensor arriving = scratch.arriving.narrow(0, 0, length);
    for (int hop = 0; hop < size - 1; ++hop) {
      const at::Tensor sent = hop == 0 ? chunk(rank - 1).narrow(0, start, length) : carried;
      HT_MPI_CHECK(MPI_Sendrecv(sent.data_ptr(), static_cast<int>(length), type, next, kRingTag, arriving.data_ptr(),
                                static_cast<int>(length), type, previous, kRingTag, comm, MPI_STATUS_IGNORE));
      // arriving = own part + arriving: the partial sum of chunk rank - hop - 2, one rank further on
      HT_MPI_CHECK(MPI_Reduce_local(chunk(rank - hop - 2).narrow(0, start, length).data_ptr(), arriving.data_ptr(),
                                    static_cast<int>(length), type, sum));
      std::swap(carried, arriving);
    }
    flat_output.narrow(0, start, length).copy_(carried);
  }
}

// Note [Staging]: the collective ran on `host`; wait() copies its result into `device`.
class StagedWork final : public Work {
 public:
  StagedWork(std::unique_ptr<Work> inner, at::Tensor device, at::Tensor host)
      : inner_(std::move(inner)), device_(std::move(device)), host_(std::move(host)) {}
  void wait() override {
    inner_->wait();
    device_.copy_(host_);
  }
  bool is_completed() override { return inner_->is_completed(); }

 private:
  std::unique_ptr<Work> inner_;
  at::Tensor device_;
  at::Tensor host_;
};

// Note [Checked collectives]: MPI pairs the ranks' collectives by their order alone. A rank that
// skips one, or issues another size, makes the rest pair up unlike (which MPI does not always
// detect: it may hang, or write past a buffer: ranks were seen dying with SIGSEGV). So by default
// (dist.check_collectives) before each one the ranks allreduce what it is: its number, operation
// and dtype, bytes and gradient bucket, as minimum and maximum in one call of fixed size, which
// cannot itself pair unlike. Where they differ, every rank throws before the collective runs, and
// the flight recorder's message names the ranks (comm/flight_recorder.h). A rank that skipped one
// meets the others' check of it with its check of the next: the bucket or the size differs, or it
// waits alone and times out. It costs one small allreduce per collective, well under 1 % of a step
// (docs/benchmarks.md, "Checked collectives").
struct CollectiveKey {
  std::int64_t number = 0;
  const char* op = "";
  const char* dtype = "";
  std::int64_t bytes = 0;
  std::int64_t bucket = -1;
};

void check_same_collective(MPI_Comm comm, const CollectiveKey& key) {
  const std::string kind = std::string(key.op) + " " + key.dtype;
  const auto kind_code = static_cast<std::int64_t>(std::hash<std::string>{}(kind) & 0xffffffff);
  constexpr int kFields = 4;
  std::int64_t values[2 * kFields] = {key.number,  kind_code,  key.bytes,  key.bucket,
                                      -key.number, -kind_code, -key.bytes, -key.bucket};  // min; max as -min(-x)
  HT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, 2 * kFields, MPI_INT64_T, MPI_MIN, comm));
  bool same = true;
  for (int i = 0; i < kFields; ++i) same = same && values[i] == -values[kFields + i];
  if (same) return;
  throw CommError(fmt::format("dist.check_collectives: the ranks issue different collectives where this rank "
                              "issues #{} ({} of {} bytes, bucket {}); numbers range {}..{}, sizes {}..{}, "
                              "buckets {}..{}",
                              key.number, kind, key.bytes, key.bucket, values[0], -values[4], values[2], -values[6],
                              values[3], -values[7]));
}

// One queued collective: what to run, and how it ended.
struct Task {
  std::function<void()> run;
  std::string what;  // "MPI allreduce of 1024 elements", for errors
  std::int64_t number = 0;   // this rank's collective number (comm/flight_recorder.h)
  const char* op = "";       // "allreduce": the span on the timeline (core/trace.h)
  std::int64_t bytes = 0;
  std::int64_t bucket = -1;  // the gradient bucket it reduces, or -1
  const char* dtype = "none";
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::exception_ptr error;
};

}  // namespace

struct MpiCommunicator::State {
  MPI_Comm comm = MPI_COMM_NULL;
  SixteenBit sixteen;
  // MPI_SUM, or our op for the 16-bit types MPI cannot add.
  MPI_Op sum_op(const at::Tensor& tensor) const;
  double timeout_s = 300;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::shared_ptr<Task>> queue;
  bool stop = false;
  bool running = false;  // a collective is in MPI, on the worker or (blocking) the caller's thread
  bool watched = false;  // a rank watch ends the job when a blocking collective hangs
  bool check_collectives = false;
  RingScratch ring;  // the worker's
  std::thread worker;

  void serve() {
    trace::name_thread("comm");
    while (true) {
      std::shared_ptr<Task> task;
      {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return (stop && queue.empty()) || (!running && !queue.empty()); });
        if (queue.empty()) return;  // stop, and nothing left
        task = queue.front();
        queue.pop_front();
        running = true;
      }
      flight::start(task->number);
      try {
        const trace::Span span(task->op, {task->bucket >= 0 ? trace::Arg{"bucket", task->bucket} : trace::Arg{},
                                          {"bytes", task->bytes}});
        if (check_collectives) {
          check_same_collective(comm, {task->number, task->op, task->dtype, task->bytes, task->bucket});
        }
        task->run();
      } catch (...) {
        task->error = std::current_exception();
      }
      task->run = nullptr;  // its tensors, dropped now: a reduced bucket's memory serves the next gather
      flight::end(task->number, task->error == nullptr);
      {
        const std::lock_guard<std::mutex> lock(mutex);
        running = false;
      }
      {
        const std::lock_guard<std::mutex> lock(task->mutex);
        task->done = true;
      }
      task->finished.notify_all();
    }
  }

  // Note [Blocking collectives]: true, and the caller may make its MPI call, when nothing is
  // queued or running; release() when done.
  bool claim_when_idle() {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!watched || running || !queue.empty()) return false;
    running = true;
    return true;
  }
  void release() {
    bool queued = false;
    {
      const std::lock_guard<std::mutex> lock(mutex);
      running = false;
      queued = !queue.empty();
    }
    // Only then: waking the worker for nothing would cost the switches this path saves.
    if (queued) changed.notify_one();
  }

  std::shared_ptr<Task> submit(const char* op, const at::Tensor& tensor, std::string what,
                               std::function<void()> run) {
    auto task = std::make_shared<Task>();
    task->op = op;
    task->bytes = tensor.defined() ? static_cast<std::int64_t>(tensor.nbytes()) : 0;
    task->bucket = trace::BucketScope::current();
    task->dtype = tensor.defined() ? c10::toString(tensor.scalar_type()) : "none";
    task->number = flight::issue(op, task->bytes, task->dtype);
    task->what = std::move(what) + " (collective #" + std::to_string(task->number) + " of this rank)";
    task->run = std::move(run);
    {
      const std::lock_guard<std::mutex> lock(mutex);
      queue.push_back(task);
    }
    changed.notify_one();
    return task;
  }
};

namespace {

// A collective that needs no waiting: one a fault left out.
class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<Task> task, double timeout_s) : task_(std::move(task)), timeout_s_(timeout_s) {}

  void wait() override {
    const activity::Scope waiting(activity::Kind::kCollective);
    std::unique_lock<std::mutex> lock(task_->mutex);
    const auto limit = std::chrono::duration<double>(timeout_s_);
    if (!task_->finished.wait_for(lock, limit, [&] { return task_->done; })) {
      std::ostringstream limit_text;
      limit_text << timeout_s_;
      throw CommError(task_->what + " did not complete within dist.timeout_s=" + limit_text.str() +
                      " s: a rank is missing from the collective (crashed, or stuck before it)" +
                      RankWatch::lagging_rank_report());
    }
    if (task_->error) std::rethrow_exception(task_->error);
  }

  bool is_completed() override {
    const std::lock_guard<std::mutex> lock(task_->mutex);
    return task_->done;
  }

 private:
  std::shared_ptr<Task> task_;
  double timeout_s_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(Bootstrap& bootstrap, double timeout_s, bool check_collectives)
    : state_(std::make_shared<State>()) {
  state_->check_collectives = check_collectives;
  // A communicator of our own, so gradient traffic never matches control-plane messages.
  HT_MPI_CHECK(MPI_Comm_dup(bootstrap.impl().world, &state_->comm));
  HT_MPI_CHECK(MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN));
  HT_MPI_CHECK(MPI_Comm_rank(state_->comm, &rank_));
  HT_MPI_CHECK(MPI_Comm_size(state_->comm, &size_));
  // Note [Blocking collectives]: a 1-rank collective cannot hang.
  state_->watched = bootstrap.watching_ranks() || size_ == 1;
  SixteenBit& sixteen = state_->sixteen;
  HT_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &sixteen.type));
  HT_MPI_CHECK(MPI_Type_commit(&sixteen.type));
  HT_MPI_CHECK(MPI_Op_create(&sum_16bit<c10::Half>, /*commute=*/1, &sixteen.half_sum));
  HT_MPI_CHECK(MPI_Op_create(&sum_16bit<c10::BFloat16>, /*commute=*/1, &sixteen.bfloat16_sum));
  state_->timeout_s = timeout_s;
  state_->worker = std::thread([state = state_] { state->serve(); });  // Note [MPI worker thread]
}

MpiCommunicator::~MpiCommunicator() {
  {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->changed.notify_one();
  // Destroyed by an exception (a timeout, a failed rank): the worker may be inside a collective
  // that never completes, and main() is about to abort the job (Note [Unwinding] in
  // bootstrap.h). Joining would hang; the worker owns a reference to the state, so let it go.
  if (std::uncaught_exceptions() > 0) {
    state_->worker.detach();
    return;
  }
  state_->worker.join();  // runs what is queued first: every rank issued it
  MPI_Op_free(&state_->sixteen.half_sum);
  MPI_Op_free(&state_->sixteen.bfloat16_sum);
  MPI_Type_free(&state_->sixteen.type);
  if (state_->comm != MPI_COMM_NULL) MPI_Comm_free(&state_->comm);
}

MPI_Op MpiCommunicator::State::sum_op(const at::Tensor& tensor) const {
  return tensor.scalar_type() == at::kHalf       ? sixteen.half_sum
         : tensor.scalar_type() == at::kBFloat16 ? sixteen.bfloat16_sum
                                                 : MPI_SUM;
}

// Whether `chunk` is the memory of chunk `rank` of `whole` (the in-place form of allgather).
bool MpiCommunicator::is_chunk_of(const at::Tensor& chunk, const at::Tensor& whole, int rank) {
  const auto bytes = static_cast<std::ptrdiff_t>(chunk.nbytes());
  return static_cast<const char*>(chunk.data_ptr()) == static_cast<const char*>(whole.data_ptr()) + rank * bytes;
}

double MpiCommunicator::average_scale(const at::Tensor& tensor, ReduceOp op) const {
  if (op != ReduceOp::kAvg) return 1.0;
  if (!at::isFloatingType(tensor.scalar_type())) throw CommError("an average needs a floating-point tensor");
  return 1.0 / size_;
}

std::function<void()> MpiCommunicator::allreduce_call(const at::Tensor& tensor, ReduceOp op) const {
  const double scale = average_scale(tensor, op);
  MPI_Comm comm = state_->comm;
  const MPI_Datatype type = mpi_type(tensor, state_->sixteen);
  const MPI_Op sum = state_->sum_op(tensor);
  return [tensor, scale, comm, type, sum] {
    HT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, tensor.data_ptr(), static_cast<int>(tensor.numel()), type, sum, comm));
    if (scale != 1.0) tensor.mul_(scale);
  };
}

std::unique_ptr<Work> MpiCommunicator::allreduce(at::Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "allreduce");
  if (!on_host(tensor)) {
    at::Tensor host = tensor.cpu();
    return std::make_unique<StagedWork>(allreduce(host, op), tensor, host);
  }
  switch (activity::collective_fault(activity::next_collective())) {  // HPCTRAIN_FAULT, for the tests
    case activity::CollectiveFault::kSkip:
      return std::make_unique<CompletedWork>();
    case activity::CollectiveFault::kResize: {
      at::Tensor shorter = tensor.view({-1}).narrow(0, 0, tensor.numel() - 1);
      return allreduce(shorter, op);
    }
    case activity::CollectiveFault::kNone:
      break;
  }
  auto task = state_->submit("allreduce", tensor, "MPI allreduce of " + std::to_string(tensor.numel()) + " elements",
                             allreduce_call(tensor, op));
  return std::make_unique<MpiWork>(std::move(task), state_->timeout_s);
}

// Note [Blocking collectives]: handing a collective to the worker and being woken when it is done
// costs two thread switches, several microseconds (on a rank's one core, the worker and the
// caller take turns): a third of a 64 KiB allreduce's time here (docs/benchmarks.md). A caller
// that waits at once gains nothing from the worker, so when nothing is queued before it, its
// collective runs on its own thread. A blocking MPI call cannot time out, so this is done only
// where the rank watch runs, which ends the job (exit 5) when this thread has been in the
// collective for the timeout (activity kInCollective); otherwise, and when collectives are
// queued (they must run first, in order), it goes through the worker as allreduce() does. The
// watch's own thread makes MPI calls while this one is blocked: that needs an MPI whose
// MPI_THREAD_MULTIPLE lets other threads progress meanwhile, as Open MPI's does
// (RankFailureEndToEnd.ABlockingCollectiveARankNeverJoinsEndsTheJob).
void MpiCommunicator::allreduce_blocking(at::Tensor& tensor, ReduceOp op) {
  if (!on_host(tensor) || !state_->claim_when_idle()) {
    allreduce(tensor, op)->wait();  // which checks the tensor
    return;
  }
  struct Release {
    State& state;
    ~Release() { state.release(); }
  } release{*state_};
  check_tensor(tensor, "allreduce");
  // As submit() does: the rank watch compares the counts, the flight recorder keeps the call.
  const flight::Blocking recorded("allreduce", static_cast<std::int64_t>(tensor.nbytes()),
                                  c10::toString(tensor.scalar_type()));
  activity::set_limit(activity::Kind::kInCollective, state_->timeout_s, "dist.timeout_s");
  const activity::Scope in_collective(activity::Kind::kInCollective);  // the check may wait too
  const trace::Span span("allreduce", {{"bytes", static_cast<std::int64_t>(tensor.nbytes())}});
  if (state_->check_collectives) {
    check_same_collective(state_->comm, {recorded.number(), "allreduce", c10::toString(tensor.scalar_type()),
                                         static_cast<std::int64_t>(tensor.nbytes()), trace::BucketScope::current()});
  }
  allreduce_call(tensor, op)();
}

std::unique_ptr<Work> MpiCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast");
  if (!on_host(tensor)) {
    at::Tensor host = tensor.cpu();
    return std::make_unique<StagedWork>(broadcast(host, root), tensor, host);
  }
  MPI_Comm comm = state_->comm;
  const MPI_Datatype type = mpi_type(tensor, state_->sixteen);
  auto task = state_->submit("broadcast", tensor, "MPI broadcast from rank " + std::to_string(root), [tensor, root, comm, type] {
    HT_MPI_CHECK(MPI_Bcast(tensor.data_ptr(), static_cast<int>(tensor.numel()), type, root, comm));
  });
  return std::make_unique<MpiWork>(std::move(task), state_->timeout_s);
}

std::unique_ptr<Work> MpiCommunicator::allgather(const at::Tensor& input, at::Tensor& output) {
  check_tensor(input, "allgather");
  check_tensor(output, "allgather");
  if (output.numel() != input.numel() * size_ || output.scalar_type() != input.scalar_type()) {
    throw CommError("MPI allgather: the output must hold " + std::to_string(size_) + " x " +
                    std::to_string(input.numel()) + " elements of the input's dtype");
  }
  if (!on_host(output)) {
    at::Tensor host = at::empty_like(output, output.options().device(at::kCPU));
    return std::make_unique<StagedWork>(allgather(input.cpu(), host), output, host);
  }
  const at::Tensor send = input.cpu();
  MPI_Comm comm = state_->comm;
  const MPI_Datatype type = mpi_type(send, state_->sixteen);
  const bool in_place = is_chunk_of(send, output, rank_);
  auto task = state_->submit("allgather", output, "MPI allgather of " + std::to_string(send.numel()) + " elements per rank",
                             [send, output, comm, type, in_place] {
                               const auto count = static_cast<int>(send.numel());
                               HT_MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : send.data_ptr(), count, type,
                                                          output.data_ptr(), count, type, comm));
                             });
  return std::make_unique<MpiWork>(std::move(task), state_->timeout_s);
}

// Note [Memory made when the gather starts]: at ZeRO stage 3 a rank's backward holds the unit it
// computes, the gradient bucket it fills, the bucket reduced before it, and the unit gathered for
// next. The worker runs collectives in order, so the next unit's gather starts only once that
// reduction is complete; made then, its memory is the reduced bucket's, which the task dropped
// (serve()), and a rank holds three such blocks rather than four (ddp/buffer_pool.h).
std::unique_ptr<Work> MpiCommunicator::allgather_filled(at::Tensor& output, const std::function<void()>& fill) {
  check_tensor(output, "allgather");
  if (output.dim() != 1 || output.numel() % size_ != 0) {
    throw CommError("MPI allgather: the output must be 1-D and hold " + std::to_string(size_) + " equal chunks");
  }
  if (!on_host(output)) return Communicator::allgather_filled(output, fill);
  MPI_Comm comm = state_->comm;
  const MPI_Datatype type = mpi_type(output, state_->sixteen);
  const auto count = static_cast<int>(output.numel() / size_);
  auto task = state_->submit("allgather", output, "MPI allgather of " + std::to_string(count) + " elements per rank",
                             [output, fill, comm, type, count] {
                               fill();
                               HT_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, count, type, output.data_ptr(), count, type,
                                                          comm));
                             });
  return std::make_unique<MpiWork>(std::move(task), state_->timeout_s);
}

std::unique_ptr<Work> MpiCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                                      ReduceOp op) {
  check_tensor(input, "reduce_scatter");
  check_tensor(output, "reduce_scatter");
  if (input.numel() != output.numel() * size_ || output.scalar_type() != input.scalar_type()) {
    throw CommError("MPI reduce_scatter: the input must hold " + std::to_string(size_) + " x " +
                    std::to_string(output.numel()) + " elements of the output's dtype");
  }
  if (!on_host(output)) {
    at::Tensor host = at::empty_like(output, output.options().device(at::kCPU));
    return std::make_unique<StagedWork>(reduce_scatter(input.cpu(), host, op), output, host);
  }
  const double scale = average_scale(output, op);
  const at::Tensor send = input.cpu();
  MPI_Comm comm = state_->comm;
  const MPI_Datatype type = mpi_type(send, state_->sixteen);
  const MPI_Op sum = state_->sum_op(send);
  auto task = state_->submit(
      "reduce_scatter", input, "MPI reduce_scatter of " + std::to_string(output.numel()) + " elements per rank",
      [send, output, scale, comm, type, sum, rank = rank_, size = size_, &ring = state_->ring] {
        ring_reduce_scatter(send, output, type, sum, comm, rank, size, ring);
        if (scale != 1.0) output.mul_(scale);
      });
  return std::make_unique<MpiWork>(std::move(task), state_->timeout_s);
}

void MpiCommunicator::barrier() {
  MPI_Comm comm = state_->comm;
  auto task = state_->submit("barrier", at::Tensor(), "MPI barrier", [comm] { HT_MPI_CHECK(MPI_Barrier(comm)); });
  MpiWork(std::move(task), state_->timeout_s).wait();
}

}  // namespace hpctrain::comm
