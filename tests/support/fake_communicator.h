// The ranks of one world played in one process, each on a thread of its own, for unit tests of
// code that takes a comm::Communicator (GradSync, Step) or a comm::ControlPlane: collectives meet
// in a FakeWorld and compute what MPI would, so a test runs real multi-rank code without MPI.
//   FakeWorld world(2);
//   run_ranks(world, [&](FakeCommunicator& comm) { ... comm.rank() ... });
// Every rank must issue the same collectives in the same order, as with MPI; a rank whose body
// throws fails the test (its peers may then wait: keep bodies to EXPECT_*).
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/comm/control_plane.h"

namespace hpctrain::testing {

class FakeWorld {
 public:
  explicit FakeWorld(int size);
  int size() const { return size_; }
  // Collective: every rank hands in a tensor (copied), and all get every rank's, in rank order.
  std::vector<at::Tensor> exchange(int rank, const at::Tensor& tensor);

 private:
  const int size_;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  std::vector<at::Tensor> arriving_;
  std::vector<at::Tensor> published_;
  int arrived_ = 0;
  std::int64_t generation_ = 0;
};

// One rank of a FakeWorld: the data plane and the control plane both.
class FakeCommunicator final : public comm::Communicator, public comm::ControlPlane {
 public:
  FakeCommunicator(FakeWorld& world, int rank) : world_(world), rank_(rank) {}

  std::string backend() const override { return "fake"; }
  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }
  std::unique_ptr<comm::Work> allreduce(at::Tensor& tensor, comm::ReduceOp op) override;
  std::unique_ptr<comm::Work> broadcast(at::Tensor& tensor, int root) override;
  std::unique_ptr<comm::Work> allgather(const at::Tensor& input, at::Tensor& output) override;
  std::unique_ptr<comm::Work> reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                             comm::ReduceOp op) override;
  void barrier() override;

  int world_rank() const override { return rank_; }
  int world_size() const override { return world_.size(); }
  void barrier() const override;
  void broadcast_bytes(std::vector<std::uint8_t>& bytes, int root) const override;
  std::vector<std::string> allgather_string(const std::string& value) const override;
  void allreduce_sum(float* values, std::int64_t count) const override;

  int allreduces = 0;                                        // data-plane allreduces issued
  at::ScalarType last_dtype = at::ScalarType::Undefined;  // of the last one

 private:
  FakeWorld& world_;
  int rank_;
};

// Runs `body` as every rank of `world`, each on its own thread, and joins them.
void run_ranks(FakeWorld& world, const std::function<void(FakeCommunicator&)>& body);

}  // namespace hpctrain::testing
