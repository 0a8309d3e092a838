// GradSync against a fake communicator that plays every rank in one process.
#include "hpctrain/ddp/grad_sync.h"

#include <gtest/gtest.h>

#include <stdexcept>

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
    last_dtype = t.scalar_type();
    t.add_(peer_value_ * (size_ - 1));
    if (op == comm::ReduceOp::kAvg) t.div_(size_);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<comm::Work> broadcast(at::Tensor& t, int root) override {
    if (root != rank_) t.fill_(peer_value_);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<comm::Work> allgather(const at::Tensor&, at::Tensor&) override {
    throw std::logic_error("GradSync does not allgather");
  }
  std::unique_ptr<comm::Work> reduce_scatter(const at::Tensor&, at::Tensor&, comm::ReduceOp) override {
    throw std::logic_error("GradSync does not reduce_scatter");
  }
  void barrier() override {}
  int allreduces = 0;
  at::ScalarType last_dtype = at::ScalarType::Undefined;

 private:
  int rank_;
  int size_;
  double peer_value_;
};

TEST(GradSync, AveragesEveryGradientInOneAllreduce) {
  at::Tensor w = at::zeros({2, 3}).set_requires_grad(true);
  at::Tensor b = at::zeros({3}).set_requires_grad(true);
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
  at::Tensor used = at::zeros({2}).set_requires_grad(true);
  at::Tensor unused = at::zeros({2}).set_requires_grad(true);
  used.mutable_grad() = at::full({2}, 3.0);
  FakeCommunicator comm(1, 2, 1.0);
  GradSync sync(comm, {used, unused});
  sync.average_gradients();
  EXPECT_TRUE(at::allclose(used.grad(), at::full({2}, 2.0)));
  ASSERT_TRUE(unused.grad().defined());
  EXPECT_TRUE(at::allclose(unused.grad(), at::full({2}, 0.5)));
}

// y = sum(a * x) + sum(b * x) for two parameters of 3 elements: their gradients are x.
struct TwoParameters {
  at::Tensor a = at::zeros({3}).set_requires_grad(true);
  at::Tensor b = at::zeros({3}).set_requires_grad(true);
  void backward(double x) {
    const at::Tensor input = at::full({3}, x);
    ((a * input).sum() + (b * input).sum()).backward();
  }
};

TEST(GradSync, WithOverlapEveryBucketStartsDuringBackwardInOrder) {
  TwoParameters p;
  FakeCommunicator comm(0, 2, 0.0);  // the peer's gradients are zero
  GradSyncOptions options;
  options.bucket_bytes = 12;  // one 3-float parameter per bucket
  GradSync sync(comm, {p.a, p.b}, options);
  ASSERT_EQ(sync.bucket_count(), 2u);
  sync.begin_backward(true);
  p.backward(4.0);
  EXPECT_EQ(comm.allreduces, 2);  // both started before average_gradients()
  sync.average_gradients();
  EXPECT_TRUE(at::allclose(p.a.grad(), at::full({3}, 2.0)));
  EXPECT_TRUE(at::allclose(p.b.grad(), at::full({3}, 2.0)));
}

TEST(GradSync, WithoutOverlapNothingStartsBeforeTheEnd) {
  TwoParameters p;
  FakeCommunicator comm(0, 2, 0.0);
  GradSyncOptions options;
  options.bucket_bytes = 12;
  options.overlap = false;
  GradSync sync(comm, {p.a, p.b}, options);
  sync.begin_backward(true);
  p.backward(4.0);
  EXPECT_EQ(comm.allreduces, 0);
  sync.average_gradients();
  EXPECT_EQ(comm.allreduces, 2);
}

TEST(GradSync, AccumulatedMicroBatchesAreReducedOnceAsTheirSum) {
  TwoParameters p;
  FakeCommunicator comm(0, 2, 0.0);
  GradSync sync(comm, {p.a, p.b});
  sync.begin_backward(false);
  p.backward(1.0);
  sync.begin_backward(false);
  p.backward(2.0);
  EXPECT_EQ(comm.allreduces, 0);  // no communication before the last micro-batch
  sync.begin_backward(true);
  p.backward(3.0);
  EXPECT_EQ(comm.allreduces, 1);
  sync.average_gradients();
  EXPECT_TRUE(at::allclose(p.a.grad(), at::full({3}, (1.0 + 2.0 + 3.0) / 2)));
  // The next step starts from nothing.
  p.a.mutable_grad().zero_();
  p.b.mutable_grad().zero_();
  sync.begin_backward(true);
  p.backward(5.0);
  sync.average_gradients();
  EXPECT_TRUE(at::allclose(p.b.grad(), at::full({3}, 5.0 / 2)));
  EXPECT_TRUE(sync.last_unused().empty());
}

TEST(GradSync, AParameterWithoutGradientIsReportedAndHoldsBackOnlyItsBucket) {
  at::Tensor used = at::zeros({3}).set_requires_grad(true);
  at::Tensor unused = at::zeros({3}).set_requires_grad(true);
  FakeCommunicator comm(0, 2, 0.0);
  GradSyncOptions options;
  options.bucket_bytes = 12;
  GradSync sync(comm, {unused, used}, options);  // bucket 0: used (reverse order), bucket 1: unused
  sync.begin_backward(true);
  (used * at::full({3}, 2.0)).sum().backward();
  EXPECT_EQ(comm.allreduces, 1);  // bucket 0 started; bucket 1 waits for the end
  sync.average_gradients();
  EXPECT_EQ(comm.allreduces, 2);
  EXPECT_EQ(sync.last_unused(), std::vector<size_t>{0});
  EXPECT_TRUE(at::allclose(unused.grad(), at::zeros({3})));
  EXPECT_TRUE(at::allclose(used.grad(), at::full({3}, 1.0)));
}

TEST(GradSync, OneRankLeavesGradientsAsTheyAreWithoutCommunicating) {
  TwoParameters p;
  FakeCommunicator comm(0, 1, 0.0);
  GradSync sync(comm, {p.a, p.b});
  sync.begin_backward(true);
  p.backward(3.0);
  sync.average_gradients();
  EXPECT_EQ(comm.allreduces, 0);
  EXPECT_TRUE(at::allclose(p.a.grad(), at::full({3}, 3.0)));
}

TEST(GradSync, CompressedBucketsTravelInHalfAndComeBackAsFloat) {
  for (const at::ScalarType wire : {at::kHalf, at::kBFloat16}) {
    TwoParameters p;
    FakeCommunicator comm(0, 2, 0.5);
    GradSyncOptions options;
    options.wire_dtype = wire;
    GradSync sync(comm, {p.a, p.b}, options);
    sync.begin_backward(true);
    p.backward(1.5);
    sync.average_gradients();
    EXPECT_EQ(comm.last_dtype, wire);
    EXPECT_EQ(p.a.grad().scalar_type(), at::kFloat);
    EXPECT_TRUE(at::allclose(p.a.grad(), at::full({3}, (1.5 + 0.5) / 2)));  // exact in 16 bits
  }
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
