// Collectives over NCCL on CUDA tensors. Compiled only when CUDA + NCCL are found (HT_WITH_NCCL);
// factory.cpp is the only other file that knows it exists. Uses the CUDA runtime directly and
// nothing from libtorch's CUDA headers, so it builds against a CPU-only libtorch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hpctrain/comm/communicator.h"

namespace hpctrain::comm {

// Collective: rank 0's ncclGetUniqueId, broadcast over the control plane; every rank returns the
// same bytes (sizeof(ncclUniqueId)). Needs no GPU: it opens rank 0's bootstrap socket only.
std::vector<std::uint8_t> shared_nccl_id(const Bootstrap& bootstrap);

class NcclCommunicator final : public Communicator {
 public:
  // Collective: rank 0 makes the unique id, Bootstrap broadcasts it, every rank joins on `device`.
  NcclCommunicator(Bootstrap& bootstrap, int device, double timeout_s);
  ~NcclCommunicator() override;

  std::string backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<Work> allreduce(at::Tensor& tensor, ReduceOp op) override;
  std::unique_ptr<Work> broadcast(at::Tensor& tensor, int root) override;
  std::unique_ptr<Work> allgather(const at::Tensor& input, at::Tensor& output) override;
  std::unique_ptr<Work> reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                       ReduceOp op) override;
  void barrier() override;

  struct State;

 private:
  std::shared_ptr<State> state_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace hpctrain::comm
