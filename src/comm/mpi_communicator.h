// Collectives over MPI. Private to src/comm; built by factory.cpp.
//
// Note [Staging]: MPI carries host memory. A tensor on a GPU (a build without NCCL, or
// dist.backend=mpi) is copied to a host tensor when the collective is issued and the result copied
// back when wait() returns, so callers see the same contract on every device, at the price of two
// copies over PCIe per collective.
//
// Note [MPI worker thread]: every collective of this communicator runs, in call order, on one
// worker thread, as a blocking MPI call. Non-blocking MPI collectives progress only while some
// thread is inside MPI, so an MPI_Iallreduce started during backward would mostly run at the
// final wait; the worker makes the reduction overlap with the caller's computation, and
// blocking MPI_Allreduce picks Open MPI's tuned algorithms (2-3x faster than MPI_Iallreduce
// here, docs/benchmarks.md). This communicator's collectives stay serialized: while one is
// queued or running, the caller makes no call of its own (it only waits on Work, or its
// allreduce_blocking() is queued too: Note [Blocking collectives] in the .cpp), and Bootstrap's
// control-plane calls happen when no collective is in flight.
#pragma once

#include <functional>

#include "hpctrain/comm/communicator.h"

namespace hpctrain::comm {

class MpiCommunicator final : public Communicator {
 public:
  // Collective. A Work not completed within `timeout_s` throws CommError from wait().
  // `check_collectives`: Note [Checked collectives] in the .cpp.
  MpiCommunicator(Bootstrap& bootstrap, double timeout_s, bool check_collectives = true);
  ~MpiCommunicator() override;

  std::string backend() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<Work> allreduce(at::Tensor& tensor, ReduceOp op) override;
  void allreduce_blocking(at::Tensor& tensor, ReduceOp op) override;
  std::unique_ptr<Work> broadcast(at::Tensor& tensor, int root) override;
  std::unique_ptr<Work> allgather(const at::Tensor& input, at::Tensor& output) override;
  std::unique_ptr<Work> allgather_filled(at::Tensor& output, const std::function<void()>& fill) override;
  std::unique_ptr<Work> reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                       ReduceOp op) override;
  void barrier() override;

  struct State;

 private:
  // 1, or 1 / size() for an average (of a floating-point tensor; else CommError).
  double average_scale(const at::Tensor& tensor, ReduceOp op) const;
  static bool is_chunk_of(const at::Tensor& chunk, const at::Tensor& whole, int rank);
  // The MPI call that allreduces `tensor` (on the host) in place, then scales it for an average.
  std::function<void()> allreduce_call(const at::Tensor& tensor, ReduceOp op) const;

  std::shared_ptr<State> state_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace hpctrain::comm
