#include "mpi_communicator.h"

#include <ATen/ATen.h>

#include <limits>

#include "bootstrap_impl.h"
#include "mpi_check.h"

namespace hpctrain::comm {
namespace {

MPI_Datatype mpi_type(const at::Tensor& tensor) {
  switch (tensor.scalar_type()) {
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
  if (!tensor.is_contiguous() || tensor.device().type() != c10::DeviceType::CPU) {
    throw CommError(std::string("MPI ") + op + " needs a contiguous CPU tensor, got " +
                    (tensor.is_contiguous() ? "" : "non-contiguous ") + tensor.device().str());
  }
}

// A non-blocking MPI collective; an average is finished by scaling once the sum has arrived.
class MpiWork final : public Work {
 public:
  MpiWork(MPI_Request request, at::Tensor tensor, double scale)
      : request_(request), tensor_(std::move(tensor)), scale_(scale) {}
  ~MpiWork() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }

  void wait() override {
    if (done_) return;
    HT_MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE));
    finish();
  }

  bool is_completed() override {
    if (done_) return true;
    int flag = 0;
    HT_MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    if (flag) finish();
    return done_;
  }

 private:
  void finish() {
    if (scale_ != 1.0) tensor_.mul_(scale_);
    done_ = true;
  }

  MPI_Request request_;
  at::Tensor tensor_;
  double scale_;
  bool done_ = false;
};

}  // namespace

struct MpiCommunicator::State {
  MPI_Comm comm = MPI_COMM_NULL;
};

MpiCommunicator::MpiCommunicator(Bootstrap& bootstrap) : state_(std::make_unique<State>()) {
  // A communicator of our own, so gradient traffic never matches control-plane messages.
  HT_MPI_CHECK(MPI_Comm_dup(bootstrap.impl().world, &state_->comm));
  HT_MPI_CHECK(MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN));
  HT_MPI_CHECK(MPI_Comm_rank(state_->comm, &rank_));
  HT_MPI_CHECK(MPI_Comm_size(state_->comm, &size_));
}

MpiCommunicator::~MpiCommunicator() {
  if (state_->comm != MPI_COMM_NULL) MPI_Comm_free(&state_->comm);
}

std::unique_ptr<Work> MpiCommunicator::allreduce(at::Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "allreduce");
  const bool average = op == ReduceOp::kAvg;
  if (average && !at::isFloatingType(tensor.scalar_type())) {
    throw CommError("allreduce average needs a floating-point tensor");
  }
  MPI_Request request = MPI_REQUEST_NULL;
  HT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, tensor.data_ptr(), static_cast<int>(tensor.numel()),
                              mpi_type(tensor), MPI_SUM, state_->comm, &request));
  return std::make_unique<MpiWork>(request, tensor, average ? 1.0 / size_ : 1.0);
}

std::unique_ptr<Work> MpiCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast");
  MPI_Request request = MPI_REQUEST_NULL;
  HT_MPI_CHECK(MPI_Ibcast(tensor.data_ptr(), static_cast<int>(tensor.numel()), mpi_type(tensor),
                          root, state_->comm, &request));
  return std::make_unique<MpiWork>(request, tensor, 1.0);
}

void MpiCommunicator::barrier() { HT_MPI_CHECK(MPI_Barrier(state_->comm)); }

}  // namespace hpctrain::comm
