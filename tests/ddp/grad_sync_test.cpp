// GradSync against fake ranks played in one process (tests/support/fake_communicator.h).
#include "hpctrain/ddp/grad_sync.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "fake_communicator.h"

namespace hpctrain::ddp {
namespace {

using testing::FakeCommunicator;
using testing::FakeWorld;
using testing::run_ranks;

TEST(GradSync, AveragesEveryGradientInOneAllreduce) {
  FakeWorld world(4);
  run_ranks(world, [](FakeCommunicator& comm) {
    at::Tensor w = at::zeros({2, 3}).set_requires_grad(true);
    at::Tensor b = at::zeros({3}).set_requires_grad(true);
    w.mutable_grad() = at::full({2, 3}, comm.rank() == 0 ? 4.0 : 2.0);  // three peers with gradient 2
    b.mutable_grad() = at::full({3}, comm.rank() == 0 ? 1.0 : 2.0);
    GradSync sync(comm, {w, b});
    sync.average_gradients();
    EXPECT_EQ(comm.allreduces, 1);
    EXPECT_TRUE(at::allclose(w.grad(), at::full({2, 3}, (4.0 + 3 * 2.0) / 4)));
    EXPECT_TRUE(at::allclose(b.grad(), at::full({3}, (1.0 + 3 * 2.0) / 4)));
    EXPECT_EQ(sync.numel(), 9);
  });
}

TEST(GradSync, MissingGradientCountsAsZero) {
  FakeWorld world(2);
  run_ranks(world, [](FakeCommunicator& comm) {
    at::Tensor used = at::zeros({2}).set_requires_grad(true);
    at::Tensor unused = at::zeros({2}).set_requires_grad(true);
    used.mutable_grad() = at::full({2}, comm.rank() == 1 ? 3.0 : 1.0);
    if (comm.rank() == 0) unused.mutable_grad() = at::full({2}, 1.0);  // rank 1 has none
    GradSync sync(comm, {used, unused});
    sync.average_gradients();
    EXPECT_TRUE(at::allclose(used.grad(), at::full({2}, 2.0)));
    ASSERT_TRUE(unused.grad().defined());
    EXPECT_TRUE(at::allclose(unused.grad(), at::full({2}, 0.5)));
  });
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
  FakeWorld world(2);
  run_ranks(world, [](FakeCommunicator& comm) {
    TwoParameters p;
    GradSyncOptions options;
    options.bucket_bytes = 12;  // one 3-float parameter per bucket
    GradSync sync(comm, {p.a, p.b}, options);
    ASSERT_EQ(sync.bucket_count(), 2u);
    sync.begin_backward(true);
    p.backward(comm.rank() == 0 ? 4.0 : 0.0);  // the peer's gradients are zero
    EXPECT_EQ(comm.allreduces, 2);  // both started before average_gradients()
    sync.average_gradients();
    EXPECT_TRUE(at::allclose(p.a.grad(), at::full({3}, 2.0)));
    EXPECT_TRUE(at::allclose(p.b.grad(), at::full({3}, 2.0)));
  });
}

TEST(GradSync, WithoutOverlapNothingStartsBeforeTheEnd) {
  FakeWorld world(2);
  run_ranks(world, [](FakeCommunicator& comm) {
    TwoParameters p;
    GradSyncOptions options;
    options.bucket_bytes = 12;
    options.overlap = false;
    GradSync sync(comm, {p.a, p.b}, options);
    sync.begin_backward(true);
    p.backward(4.0);
    EXPECT_EQ(comm.allreduces, 0);
    sync.average_gradients();
    EXPECT_EQ(comm.allreduces, 2);
  });
}

TEST(GradSync, AccumulatedMicroBatchesAreReducedOnceAsTheirSum) {
  FakeWorld world(2);
  run_ranks(world, [](FakeCommunicator& comm) {
    const double mine = comm.rank() == 0 ? 1.0 : 0.0;  // the peer's gradients are zero
    TwoParameters p;
    GradSync sync(comm, {p.a, p.b});
    sync.begin_backward(false);
    p.backward(1.0 * mine);
    sync.begin_backward(false);
    p.backward(2.0 * mine);
    EXPECT_EQ(comm.allreduces, 0);  // no communication before the last micro-batch
    sync.begin_backward(true);
    p.backward(3.0 * mine);
    EXPECT_EQ(comm.allreduces, 1);
    sync.average_gradients();
    EXPECT_TRUE(at::allclose(p.a.grad(), at::full({3}, (1.0 + 2.0 + 3.0) / 2)));
    // The next step starts from nothing.
    p.a.mutable_grad().zero_();
    p.b.mutable_grad().zero_();
    sync.begin_backward(true);
    p.backward(5.0 * mine);
    sync.average_gradients();
    EXPECT_TRUE(at::allclose(p.b.grad(), at::full({3}, 5.0 / 2)));
    EXPECT_TRUE(sync.last_unused().empty());
  });
}

TEST(GradSync, AParameterWithoutGradientIsReportedAndHoldsBackOnlyItsBucket) {
  FakeWorld world(2);
  run_ranks(world, [](FakeCommunicator& comm) {
    at::Tensor used = at::zeros({3}).set_requires_grad(true);
    at::Tensor unused = at::zeros({3}).set_requires_grad(true);
    GradSyncOptions options;
    options.bucket_bytes = 12;
    GradSync sync(comm, {unused, used}, options);  // bucket 0: used (reverse order), bucket 1: unused
    sync.begin_backward(true);
    (used * at::full({3}, comm.rank() == 0 ? 2.0 : 0.0)).sum().backward();
    EXPECT_EQ(comm.allreduces, 1);  // bucket 0 started; bucket 1 waits for the end
    sync.average_gradients();
    EXPECT_EQ(comm.allreduces, 2);
    EXPECT_EQ(sync.last_unused(), std::vector<size_t>{0});
    EXPECT_TRUE(at::allclose(unused.grad(), at::zeros({3})));
    EXPECT_TRUE(at::allclose(used.grad(), at::full({3}, 1.0)));
  });
}

TEST(GradSync, OneRankLeavesGradientsAsTheyAreWithoutCommunicating) {
  FakeWorld world(1);
  run_ranks(world, [](FakeCommunicator& comm) {
    TwoParameters p;
    GradSync sync(comm, {p.a, p.b});
    sync.begin_backward(true);
    p.backward(3.0);
    sync.average_gradients();
    EXPECT_EQ(comm.allreduces, 0);
    EXPECT_TRUE(at::allclose(p.a.grad(), at::full({3}, 3.0)));
  });
}

TEST(GradSync, CompressedBucketsTravelInHalfAndComeBackAsFloat) {
  for (const at::ScalarType wire : {at::kHalf, at::kBFloat16}) {
    FakeWorld world(2);
    run_ranks(world, [wire](FakeCommunicator& comm) {
      TwoParameters p;
      GradSyncOptions options;
      options.wire_dtype = wire;
      GradSync sync(comm, {p.a, p.b}, options);
      sync.begin_backward(true);
      p.backward(comm.rank() == 0 ? 1.5 : 0.5);
      sync.average_gradients();
      EXPECT_EQ(comm.last_dtype, wire);
      EXPECT_EQ(p.a.grad().scalar_type(), at::kFloat);
      EXPECT_TRUE(at::allclose(p.a.grad(), at::full({3}, (1.5 + 0.5) / 2)));  // exact in 16 bits
    });
  }
}

TEST(BroadcastTensors, NonRootsTakeTheRootsValuesForEveryDtype) {
  FakeWorld world(2);
  run_ranks(world, [](FakeCommunicator& comm) {
    at::Tensor f = comm.rank() == 0 ? at::full({3}, 7.0) : at::zeros({3});
    at::Tensor i = comm.rank() == 0 ? at::full({2}, 7, at::kLong) : at::zeros({2}, at::kLong);
    broadcast_tensors(comm, {f, i}, 0);
    EXPECT_TRUE(at::equal(f, at::full({3}, 7.0)));
    EXPECT_TRUE(at::equal(i, at::full({2}, 7, at::kLong)));
  });
}

}  // namespace
}  // namespace hpctrain::ddp
