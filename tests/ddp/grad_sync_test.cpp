// GradSync against a fake communicator that plays every rank in one process.
#include "hpctrain/ddp/grad_sync.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "hpctrain/comm/communicator.h"

namespace hpctrain::ddp {
namespace {

class DoneWork final : public comm::Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

// Pretends to be rank `rank` of `size`; the other ranks' contributions are `peer_value` everywhere.
class FakeCommunicator final : public comm::Communicator {
 public:
  FakeCommunicator(int rank, int size, double peer_value)
      : rank_(rank), size_(size), peer_value_(peer_value) {}
  std::string backend() const override { return "fake"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::unique_ptr<comm::Work> allreduce(at::Tensor& t, comm::ReduceOp op) override {
    ++allreduces;
    t.add_(peer_value_ * (size_ - 1));
    if (op == comm::ReduceOp::kAvg) t.div_(size_);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<comm::Work> broadcast(at::Tensor& t, int root) override {
    if (root != rank_) t.fill_(peer_value_);
    return std::make_unique<DoneWork>();
  }
  void barrier() override {}
  int allreduces = 0;

 private:
  int rank_;
  int size_;
  double peer_value_;
};

TEST(GradSync, AveragesEveryGradientInOneAllreduce) {
  at::Tensor w = at::zeros({2, 3}, at::requires_grad());
  at::Tensor b = at::zeros({3}, at::requires_grad());
  w.mutable_grad() = at::full({2, 3}, 4.0);
  b.mutable_grad() = at::full({3}, 1.0);
  FakeCommunicator comm(0, 4, 2.0);  // three peers with gradient 2
  GradSync sync(comm, {w, b});
  sync.average_gradients();
  EXPECT_EQ(comm.allreduces, 1);
  EXPECT_TRUE(at::allclose(w.grad(), at::full({2, 3}, (4.0 + 3 * 2.0) / 4)));
  EXPECT_TRUE(at::allclose(b.grad(), at::full({3}, (1.0 + 3 * 2.0) / 4)));
  EXPECT_EQ(sync.numel(), 9);
}

TEST(GradSync, MissingGradientCountsAsZero) {
  at::Tensor used = at::zeros({2}, at::requires_grad());
  at::Tensor unused = at::zeros({2}, at::requires_grad());
  used.mutable_grad() = at::full({2}, 3.0);
  FakeCommunicator comm(1, 2, 1.0);
  GradSync sync(comm, {used, unused});
  sync.average_gradients();
  EXPECT_TRUE(at::allclose(used.grad(), at::full({2}, 2.0)));
  ASSERT_TRUE(unused.grad().defined());
  EXPECT_TRUE(at::allclose(unused.grad(), at::full({2}, 0.5)));
}

TEST(BroadcastTensors, NonRootsTakeTheRootsValuesForEveryDtype) {
  at::Tensor f = at::zeros({3});
  at::Tensor i = at::zeros({2}, at::kLong);
  FakeCommunicator comm(1, 2, 7.0);
  broadcast_tensors(comm, {f, i}, 0);
  EXPECT_TRUE(at::equal(f, at::full({3}, 7.0)));
  EXPECT_TRUE(at::equal(i, at::full({2}, 7, at::kLong)));
}

}  // namespace
}  // namespace hpctrain::ddp
