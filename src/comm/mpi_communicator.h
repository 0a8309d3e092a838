// Collectives over MPI on host tensors. Private to src/comm; built by factory.cpp.
//
// Note [MPI worker thread]: every collective of this communicator runs, in call order, on one
// worker thread, as a blocking MPI call. Non-blocking MPI collectives progress only while some
// thread is inside MPI, so an MPI_Iallreduce started during backward would mostly run at the
// final wait; the worker makes the reduction overlap with the caller's computation, and
// blocking MPI_Allreduce picks Open MPI's tuned algorithms (2-3x faster than MPI_Iallreduce
// here, docs/benchmarks.md). MPI stays MPI_THREAD_SERIALIZED: while a collective is queued
// or running, the caller makes no MPI call of its own (it only waits on Work), and Bootstrap's
// control-plane calls happen when no collective is in flight.
#pragma once

#include "hpctrain/comm/communicator.h"

namespace hpctrain::comm {

class MpiCommunicator final : public Communicator {
 public:
  // Collective. A Work not completed within `timeout_s` throws CommError from wait().
  MpiCommunicator(Bootstrap& bootstrap, double timeout_s);
  ~MpiCommunicator() override;

  std::string backend() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<Work> allreduce(at::Tensor& tensor, ReduceOp op) override;
  std::unique_ptr<Work> broadcast(at::Tensor& tensor, int root) override;
  void barrier() override;

  struct State;

 private:
  std::shared_ptr<State> state_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace hpctrain::comm
