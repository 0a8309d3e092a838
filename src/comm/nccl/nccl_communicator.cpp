#include "nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/flight_recorder.h"
#include "hpctrain/core/activity.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/trace.h"
#include "../rank_watch.h"

#define HT_CUDA_CHECK(call)                                                              \
  do {                                                                                   \
    const cudaError_t ht_cuda_rc = (call);                                               \
    if (ht_cuda_rc != cudaSuccess) {                                                     \
      throw ::hpctrain::CommError(std::string(#call) + " failed: " +                     \
                                  cudaGetErrorString(ht_cuda_rc) + " (" +                \
                                  ::hpctrain::source_location(__FILE__, __LINE__) + " " + \
                                  ::hpctrain::log::where() + ")");                       \
    }                                                                                    \
  } while (0)

#define HT_NCCL_CHECK(call)                                                              \
  do {                                                                                   \
    const ncclResult_t ht_nccl_rc = (call);                                              \
    if (ht_nccl_rc != ncclSuccess) {                                                     \
      throw ::hpctrain::CommError(std::string(#call) + " failed: " +                     \
                                  ncclGetErrorString(ht_nccl_rc) + " (" +                \
                                  ::hpctrain::source_location(__FILE__, __LINE__) + " " + \
                                  ::hpctrain::log::where() + ")");                       \
    }                                                                                    \
  } while (0)

namespace hpctrain::comm {

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;  // NCCL's own stream, ordered after compute by events
  int device = 0;
  double timeout_s = 300;
  bool aborted = false;

  // Note [NCCL errors]: a failed or stuck NCCL communicator must be aborted before the error is
  // reported, or other ranks (and this rank's exit) hang inside NCCL.
  [[noreturn]] void abort_and_throw(const std::string& what) {
    if (!aborted && comm != nullptr) ncclCommAbort(comm);
    aborted = true;
    comm = nullptr;
    throw CommError(what + " " + log::where());
  }
};

namespace {

ncclDataType_t nccl_type(const at::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kLong: return ncclInt64;
    case at::kInt: return ncclInt32;
    case at::kByte: return ncclUint8;
    default:
      throw CommError(std::string("NCCL collectives do not support dtype ") +
                      c10::toString(tensor.scalar_type()));
  }
}

// Completion is an event recorded on the NCCL stream after the collective. wait() makes the
// compute (legacy default) stream wait for it and polls on the host for errors and the timeout.
class NcclWork final : public Work {
 public:
  // The flight recorder counts it issued and started (on NCCL's stream) at once.
  // `held`: the collective's tensors, kept until wait() has ordered the compute stream after it
  // (communicator.h), so the caching allocator cannot lend their memory out while NCCL uses it.
  NcclWork(std::shared_ptr<NcclCommunicator::State> state, cudaEvent_t done, const char* op, std::int64_t bytes,
           std::string what, std::vector<at::Tensor> held = {})
      : state_(std::move(state)),
        held_(std::move(held)),
        done_(done),
        number_(flight::issue(op, bytes, "device")),
        what_(std::move(what) + " (collective #" + std::to_string(number_) + " of this rank)"),
        op_(op),
        bytes_(bytes),
        bucket_(trace::BucketScope::current()),
        issued_us_(trace::recording() ? trace::now_us() : -1) {
    flight::start(number_);
  }
  ~NcclWork() override { cudaEventDestroy(done_); }

  bool is_completed() override { return cudaEventQuery(done_) == cudaSuccess; }

  void wait() override {
    const activity::Scope waiting(activity::Kind::kCollective);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(state_->timeout_s);
    while (true) {
      const cudaError_t rc = cudaEventQuery(done_);
      if (rc == cudaSuccess) break;
      if (rc != cudaErrorNotReady) {
        flight::end(number_, false);
        state_->abort_and_throw(what_ + ": " + cudaGetErrorString(rc));
      }
      ncclResult_t async = ncclSuccess;
      if (state_->comm != nullptr) ncclCommGetAsyncError(state_->comm, &async);
      if (async != ncclSuccess) {
        flight::end(number_, false);
        state_->abort_and_throw(what_ + ": " + ncclGetErrorString(async));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        flight::end(number_, false);
        state_->abort_and_throw(what_ + " did not complete within dist.timeout_s=" +
                                std::to_string(state_->timeout_s) + " s" + RankWatch::lagging_rank_report());
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    flight::end(number_, true);
    HT_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, done_, 0));
    held_.clear();
    // No host thread runs it: the span is the host's view, from the issue to the wait's end.
    if (issued_us_ >= 0) {
      trace::add_span("nccl (issue to wait)", op_, issued_us_, trace::now_us(),
                      {bucket_ >= 0 ? trace::Arg{"bucket", bucket_} : trace::Arg{}, {"bytes", bytes_}});
    }
  }

 private:
  std::shared_ptr<NcclCommunicator::State> state_;
  std::vector<at::Tensor> held_;
  cudaEvent_t done_;
  std::int64_t number_;
  std::string what_;
  const char* op_;
  std::int64_t bytes_;
  std::int64_t bucket_;
  double issued_us_;
};

void check_tensor(const at::Tensor& tensor, const char* op) {
  if (!tensor.is_cuda() || !tensor.is_contiguous()) {
    throw CommError(std::string("NCCL ") + op + " needs a contiguous CUDA tensor, got " +
                    tensor.device().str());
  }
}

}  // namespace

std::vector<std::uint8_t> shared_nccl_id(const Bootstrap& bootstrap) {
  std::vector<std::uint8_t> bytes(sizeof(ncclUniqueId));
  if (bootstrap.world_rank() == 0) {
    ncclUniqueId id;
    HT_NCCL_CHECK(ncclGetUniqueId(&id));
    std::memcpy(bytes.data(), &id, sizeof(id));
  }
  bootstrap.broadcast_bytes(bytes, 0);
  HT_CHECK(bytes.size() == sizeof(ncclUniqueId), "the broadcast NCCL id has " + std::to_string(bytes.size()) +
                                                     " bytes, not " + std::to_string(sizeof(ncclUniqueId)));
  return bytes;
}

NcclCommunicator::NcclCommunicator(Bootstrap& bootstrap, int device, double timeout_s)
    : state_(std::make_shared<State>()), rank_(bootstrap.world_rank()),
      size_(bootstrap.world_size()) {
  state_->device = device;
  state_->timeout_s = timeout_s;
  HT_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id;
  const std::vector<std::uint8_t> bytes = shared_nccl_id(bootstrap);
  std::memcpy(&id, bytes.data(), sizeof(id));
  const ncclResult_t init = ncclCommInitRank(&state_->comm, size_, id, rank_);
  if (init != ncclSuccess) {
    throw CommError(std::string("NCCL could not create its communicator: ") + ncclGetErrorString(init) + " (" +
                    log::where() + "); rerun with NCCL_DEBUG=INFO to see why (often NCCL_SOCKET_IFNAME "
                    "names no usable interface), or train over MPI with --dist.backend=mpi");
  }
  HT_CUDA_CHECK(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking));
  bootstrap.barrier();
}

NcclCommunicator::~NcclCommunicator() {
  if (state_->comm != nullptr) ncclCommDestroy(state_->comm);
  if (state_->stream != nullptr) cudaStreamDestroy(state_->stream);
}

namespace {

// Orders the NCCL stream after everything queued so far on the compute stream.
void order_after_compute(cudaStream_t stream) {
  cudaEvent_t ready = nullptr;
  HT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  HT_CUDA_CHECK(cudaEventRecord(ready, cudaStreamLegacy));
  HT_CUDA_CHECK(cudaStreamWaitEvent(stream, ready, 0));
  HT_CUDA_CHECK(cudaEventDestroy(ready));
}

cudaEvent_t record_done(cudaStream_t stream) {
  cudaEvent_t done = nullptr;
  HT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  HT_CUDA_CHECK(cudaEventRecord(done, stream));
  return done;
}

}  // namespace

std::unique_ptr<Work> NcclCommunicator::allreduce(at::Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "allreduce");
  if (state_->comm == nullptr) throw CommError("NCCL communicator was aborted after an error");
  order_after_compute(state_->stream);
  const ncclRedOp_t nccl_op = op == ReduceOp::kAvg ? ncclAvg : ncclSum;
  HT_NCCL_CHECK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(),
                              static_cast<size_t>(tensor.numel()), nccl_type(tensor), nccl_op,
                              state_->comm, state_->stream));
  return std::make_unique<NcclWork>(state_, record_done(state_->stream),
                                    "allreduce", static_cast<std::int64_t>(tensor.nbytes()),
                                    "NCCL allreduce of " + std::to_string(tensor.numel()) + " elements",
                                    std::vector<at::Tensor>{tensor});
}

std::unique_ptr<Work> NcclCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast");
  if (state_->comm == nullptr) throw CommError("NCCL communicator was aborted after an error");
  order_after_compute(state_->stream);
  HT_NCCL_CHECK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(),
                              static_cast<size_t>(tensor.numel()), nccl_type(tensor), root,
                              state_->comm, state_->stream));
  return std::make_unique<NcclWork>(state_, record_done(state_->stream),
                                    "broadcast", static_cast<std::int64_t>(tensor.nbytes()),
                                    "NCCL broadcast from rank " + std::to_string(root),
                                    std::vector<at::Tensor>{tensor});
}

std::unique_ptr<Work> NcclCommunicator::allgather(const at::Tensor& input, at::Tensor& output) {
  check_tensor(input, "allgather");
  check_tensor(output, "allgather");
  if (output.numel() != input.numel() * size_ || output.scalar_type() != input.scalar_type()) {
    throw CommError("NCCL allgather: the output must hold " + std::to_string(size_) + " x " +
                    std::to_string(input.numel()) + " elements of the input's dtype");
  }
  if (state_->comm == nullptr) throw CommError("NCCL communicator was aborted after an error");
  order_after_compute(state_->stream);
  HT_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()),
                              nccl_type(input), state_->comm, state_->stream));
  return std::make_unique<NcclWork>(state_, record_done(state_->stream),
                                    "allgather", static_cast<std::int64_t>(output.nbytes()),
                                    "NCCL allgather of " + std::to_string(input.numel()) + " elements per rank",
                                    std::vector<at::Tensor>{input, output});
}

std::unique_ptr<Work> NcclCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                                       ReduceOp op) {
  check_tensor(input, "reduce_scatter");
  check_tensor(output, "reduce_scatter");
  if (input.numel() != output.numel() * size_ || output.scalar_type() != input.scalar_type()) {
    throw CommError("NCCL reduce_scatter: the input must hold " + std::to_string(size_) + " x " +
                    std::to_string(output.numel()) + " elements of the output's dtype");
  }
  if (state_->comm == nullptr) throw CommError("NCCL communicator was aborted after an error");
  order_after_compute(state_->stream);
  HT_NCCL_CHECK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                                  nccl_type(input), op == ReduceOp::kAvg ? ncclAvg : ncclSum,
                                  state_->comm, state_->stream));
  return std::make_unique<NcclWork>(state_, record_done(state_->stream),
                                    "reduce_scatter", static_cast<std::int64_t>(input.nbytes()),
                                    "NCCL reduce_scatter of " + std::to_string(output.numel()) +
                                        " elements per rank",
                                    std::vector<at::Tensor>{input, output});
}

void NcclCommunicator::barrier() {
  // An allreduce of one value is NCCL's barrier; it also surfaces asynchronous errors.
  void* scratch = nullptr;
  HT_CUDA_CHECK(cudaMalloc(&scratch, sizeof(float)));
  HT_NCCL_CHECK(ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, state_->comm, state_->stream));
  NcclWork(state_, record_done(state_->stream), "barrier", 4, "NCCL barrier").wait();
  HT_CUDA_CHECK(cudaStreamSynchronize(state_->stream));
  cudaFree(scratch);
}

}  // namespace hpctrain::comm
