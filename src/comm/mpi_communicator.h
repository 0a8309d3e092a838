// Collectives over MPI on host tensors (CPU, or CUDA when NCCL is absent: not yet supported).
// Private to src/comm; built by factory.cpp.
#pragma once

#include "hpctrain/comm/communicator.h"

namespace hpctrain::comm {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(Bootstrap& bootstrap);
  ~MpiCommunicator() override;

  std::string backend() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<Work> allreduce(at::Tensor& tensor, ReduceOp op) override;
  std::unique_ptr<Work> broadcast(at::Tensor& tensor, int root) override;
  void barrier() override;

 private:
  struct State;
  std::unique_ptr<State> state_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace hpctrain::comm
