// The golden check of data parallelism: N ranks with B samples each, gradients averaged, equal the
// gradient of one process on the N*B concatenated samples, and are identical on every rank.
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <thread>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/activity.h"
#include "hpctrain/core/error.h"
#include "hpctrain/data/distributed_sampler.h"
#include "hpctrain/ddp/buffer_pool.h"
#include "hpctrain/ddp/grad_sync.h"
#include "hpctrain/model/model.h"
#include "hpctrain/optim/nonfinite.h"
#include "hpctrain/train/step_loss.h"
#include "mpi_fixture.h"

namespace hpctrain {
namespace {

std::shared_ptr<model::Model> make_mlp() {
  config::ModelConfig c;
  c.name = config::ModelName::kMlp;
  c.mlp_hidden = "32,16";
  c.dropout = 0.0;
  return model::make_model(c, {{1, 6, 6}, 5});
}

at::Tensor flat_grads(model::Model& m) {
  std::vector<at::Tensor> parts;
  for (const auto& p : m.module().parameters()) parts.push_back(p.grad().reshape({-1}));
  return torch::cat(parts);
}

TEST(GradientEquivalence, AveragedShardGradientsEqualTheFullBatchGradient) {
  comm::Bootstrap& boot = *testing::g_bootstrap;
  auto comm = comm::make_communicator(config::Backend::kMpi, boot, false, 0);
  const int world = comm->size();
  const int rank = comm->rank();
  constexpr std::int64_t kPerRank = 7;

  torch::manual_seed(1234);  // same inputs on every rank; each takes its own slice
  const at::Tensor inputs = torch::randn({world * kPerRank, 1, 6, 6});
  const at::Tensor targets = torch::randint(0, 5, {world * kPerRank}, torch::kLong);

  torch::manual_seed(99);
  auto net = make_mlp();
  ddp::broadcast_tensors(*comm, net->module().parameters(), 0);
  ddp::GradSync sync(*comm, net->module().parameters());
  const at::Tensor loss = torch::nn::functional::cross_entropy(
      net->forward(inputs.narrow(0, rank * kPerRank, kPerRank)),
      targets.narrow(0, rank * kPerRank, kPerRank));
  loss.backward();
  sync.average_gradients();
  const at::Tensor averaged = flat_grads(*net);

  torch::manual_seed(99);
  auto reference = make_mlp();
  ddp::broadcast_tensors(*comm, reference->module().parameters(), 0);
  torch::nn::functional::cross_entropy(reference->forward(inputs), targets).backward();
  const at::Tensor expected = flat_grads(*reference);

  const double relative = (averaged - expected).norm().item<double>() / expected.norm().item<double>();
  EXPECT_LE(relative, 1e-5) << "rank " << rank;
  EXPECT_GT(expected.norm().item<double>(), 0.0);

  // Bit-identical on every rank: compare with rank 0's copy.
  at::Tensor rank0 = averaged.clone();
  comm->broadcast(rank0, 0)->wait();
  EXPECT_TRUE(torch::equal(rank0, averaged)) << "rank " << rank << " differs from rank 0";
}

TEST(GradientEquivalence, PaddedLastStepMatchesTheMeanOverRealSamples) {
  // 2W+1 samples, batch 3 per rank: one step with W*3 slots of which W-1 are padding. The masked
  // loss must give every rank the gradient of the plain mean over the 2W+1 real samples.
  comm::Bootstrap& boot = *testing::g_bootstrap;
  auto comm = comm::make_communicator(config::Backend::kMpi, boot, false, 0);
  const int world = comm->size();
  const std::int64_t n = 2 * world + 1;
  torch::manual_seed(4321);
  const at::Tensor inputs = torch::randn({n, 1, 6, 6});
  const at::Tensor targets = torch::randint(0, 5, {n}, torch::kLong);

  data::SamplerOptions options;
  options.dataset_size = n;
  options.world_size = world;
  options.rank = comm->rank();
  options.batch_size = 3;
  options.seed = 5;
  const data::DistributedSampler sampler(options);
  ASSERT_EQ(sampler.steps_from(0), 1);
  const data::SamplerStep step = sampler.step(sampler.global_order(0), 0);
  const at::Tensor index = torch::tensor(step.indices, torch::kLong);

  torch::manual_seed(99);
  auto net = make_mlp();
  ddp::GradSync sync(*comm, net->module().parameters());
  const at::Tensor losses = torch::nn::functional::cross_entropy(
      net->forward(inputs.index_select(0, index)), targets.index_select(0, index),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  train::step_loss(losses, torch::tensor(step.weights), world, step.global_real).backward();
  sync.average_gradients();

  torch::manual_seed(99);
  auto reference = make_mlp();
  torch::nn::functional::cross_entropy(reference->forward(inputs), targets).backward();
  const at::Tensor expected = flat_grads(*reference);
  const double relative =
      (flat_grads(*net) - expected).norm().item<double>() / expected.norm().item<double>();
  EXPECT_LE(relative, 1e-5) << "rank " << comm->rank();
}

TEST(GradientEquivalence, BroadcastMakesBuffersEqualToTheRoot) {
  comm::Bootstrap& boot = *testing::g_bootstrap;
  auto comm = comm::make_communicator(config::Backend::kMpi, boot, false, 0);
  const int root = comm->size() - 1;
  at::Tensor running = torch::full({4}, static_cast<float>(comm->rank()));
  at::Tensor count = torch::full({}, comm->rank() * 10, torch::kLong);
  ddp::broadcast_tensors(*comm, {running, count}, root);
  EXPECT_TRUE(torch::equal(running, torch::full({4}, static_cast<float>(root))));
  EXPECT_EQ(count.item<std::int64_t>(), root * 10);
}

TEST(MpiCommunicator, AllreduceSumAndAverage) {
  comm::Bootstrap& boot = *testing::g_bootstrap;
  auto comm = comm::make_communicator(config::Backend::kAuto, boot, false, 0);
  EXPECT_EQ(comm->backend(), "mpi");
  const int world = comm->size();
  at::Tensor sum = torch::full({5}, static_cast<double>(comm->rank() + 1), torch::kFloat64);
  comm->allreduce(sum, comm::ReduceOp::kSum)->wait();
  EXPECT_TRUE(torch::equal(sum, torch::full({5}, world * (world + 1) / 2.0, torch::kFloat64)));
  at::Tensor avg = torch::full({3}, static_cast<float>(comm->rank()));
  auto work = comm->allreduce(avg, comm::ReduceOp::kAvg);
  work->wait();
  EXPECT_TRUE(work->is_completed());
  EXPECT_TRUE(torch::allclose(avg, torch::full({3}, (world - 1) / 2.0f)));
  at::Tensor ints = torch::ones({2}, torch::kLong);
  EXPECT_THROW(comm->allreduce(ints, comm::ReduceOp::kAvg), CommError);
}

// allreduce_blocking: the same sums and averages; behind a collective still queued it waits its
// turn, on every rank: run at once, it would meet the other ranks' queued collective (another
// tensor, another size) or run beside it on the same communicator.
TEST(MpiCommunicator, ABlockingAllreduceSumsAveragesAndKeepsItsPlaceInLine) {
  comm::Bootstrap& boot = *testing::g_bootstrap;
  auto comm = comm::make_communicator(config::Backend::kMpi, boot, false, 0);
  const int world = comm->size();
  const double triangle = world * (world + 1) / 2.0;
  at::Tensor sum = torch::full({5}, static_cast<double>(comm->rank() + 1), torch::kFloat64);
  comm->allreduce_blocking(sum, comm::ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(sum, torch::full({5}, triangle, torch::kFloat64)));
  at::Tensor avg = torch::full({3}, static_cast<float>(comm->rank()));
  comm->allreduce_blocking(avg, comm::ReduceOp::kAvg);
  EXPECT_TRUE(torch::allclose(avg, torch::full({3}, (world - 1) / 2.0f)));

  at::Tensor big = torch::full({1 << 22}, static_cast<double>(comm->rank() + 1), torch::kFloat64);
  at::Tensor small = torch::full({7}, 10.0 * (comm->rank() + 1), torch::kFloat64);
  auto queued = comm->allreduce(big, comm::ReduceOp::kSum);
  comm->allreduce_blocking(small, comm::ReduceOp::kSum);
  EXPECT_TRUE(queued->is_completed());
  queued->wait();
  EXPECT_TRUE(torch::equal(big, torch::full({1 << 22}, triangle, torch::kFloat64)));
  EXPECT_TRUE(torch::equal(small, torch::full({7}, 10.0 * triangle, torch::kFloat64)));
}

// Where the rank watch runs (mpi_test_main.cpp starts it), a blocking allreduce with nothing
// queued runs on the calling thread, which is meanwhile "in a blocking collective" (the activity
// the watch times), not waiting for the worker.
TEST(MpiCommunicator, ABlockingAllreduceRunsOnTheCallingThread) {
  comm::Bootstrap& boot = *testing::g_bootstrap;
  auto comm = comm::make_communicator(config::Backend::kMpi, boot, false, 0);
  if (comm->size() == 1) GTEST_SKIP() << "needs a second rank to be late";
  if (!boot.watching_ranks()) GTEST_SKIP() << "no rank watch (MPI without MPI_THREAD_MULTIPLE)";
  at::Tensor values = torch::ones({4});
  if (comm->rank() == 0) {
    std::atomic<bool> done{false};
    std::atomic<bool> seen_in_collective{false};
    std::thread observer([&] {
      while (!done.load() && !seen_in_collective.load()) {
        seen_in_collective = activity::now().kind == activity::Kind::kInCollective;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
    comm->allreduce_blocking(values, comm::ReduceOp::kSum);
    done = true;
    observer.join();
    EXPECT_TRUE(seen_in_collective.load());
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    comm->allreduce_blocking(values, comm::ReduceOp::kSum);
  }
  EXPECT_TRUE(torch::equal(values, torch::full({4}, static_cast<float>(comm->size()))));
}

TEST(MpiCommunicator, AllgatherAndReduceScatterInRankOrder) {
  auto comm = comm::make_communicator(config::Backend::kMpi, *testing::g_bootstrap, false, 0);
  const int world = comm->size();
  const int rank = comm->rank();
  // Rank r contributes {r, 10 r, 100 r}: the gathered tensor is every contribution in rank order.
  const at::Tensor mine = torch::tensor({1.0f, 10.0f, 100.0f}) * rank;
  at::Tensor gathered = torch::empty({world * 3});
  comm->allgather(mine, gathered)->wait();
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(torch::equal(gathered.narrow(0, r * 3, 3), torch::tensor({1.0f, 10.0f, 100.0f}) * r)) << r;
  }
  // Every rank holds 0..2W-1 + rank: chunk r (elements 2r, 2r+1) summed over ranks lands on rank r.
  const at::Tensor input = torch::arange(2 * world, torch::kFloat64) + rank;
  const double rank_sum = world * (world - 1) / 2.0;
  at::Tensor sum = torch::empty({2}, torch::kFloat64);
  comm->reduce_scatter(input, sum, comm::ReduceOp::kSum)->wait();
  EXPECT_TRUE(torch::equal(sum, torch::tensor({2.0 * rank * world + rank_sum, (2.0 * rank + 1) * world + rank_sum},
                                              torch::kFloat64)));
  at::Tensor average = torch::empty({2}, torch::kFloat64);
  comm->reduce_scatter(input, average, comm::ReduceOp::kAvg)->wait();
  EXPECT_TRUE(torch::allclose(average, sum / world));
  // Half precision takes the same path as gradient compression (our own sum op).
  at::Tensor half = torch::empty({2}, torch::kHalf);
  comm->reduce_scatter(input.to(torch::kHalf), half, comm::ReduceOp::kSum)->wait();
  EXPECT_TRUE(torch::equal(half.to(torch::kFloat64), sum));
  // In place (NCCL's convention, which stage 1 of a sharded optimizer uses): the rank's own
  // chunk of the input receives the result; an in-place gather takes the rank's chunk as input.
  at::Tensor whole = input.clone();
  at::Tensor own = whole.narrow(0, 2 * rank, 2);
  comm->reduce_scatter(whole, own, comm::ReduceOp::kAvg)->wait();
  EXPECT_TRUE(torch::equal(own, average)) << "in-place reduce_scatter";
  at::Tensor all = torch::full({world * 3}, -1.0f);
  at::Tensor slot = all.narrow(0, 3 * rank, 3);
  slot.copy_(mine);
  comm->allgather(slot, all)->wait();
  EXPECT_TRUE(torch::equal(all, gathered)) << "in-place allgather";
  at::Tensor wrong = torch::empty({3}, torch::kFloat64);
  EXPECT_THROW(comm->reduce_scatter(input, wrong, comm::ReduceOp::kSum), CommError);
  EXPECT_THROW(comm->allgather(mine, wrong), CommError);
}

// Note [Memory made when the gather starts]: a reduce-scatter's Work drops its input once
// reduced, and a filled gather queued after it makes its memory only then: the pool lends it the
// block the reduced bucket gave back.
TEST(MpiCommunicator, AFilledGatherStartsWithTheMemoryAnEarlierReductionGaveBack) {
  auto comm = comm::make_communicator(config::Backend::kMpi, *testing::g_bootstrap, false, 0);
  const int world = comm->size();
  const int rank = comm->rank();
  const std::int64_t chunk = 1 << 18;  // 1 MiB of floats: pooled
  ddp::BufferPool pool;
  at::Tensor bucket = pool.empty(world * chunk, torch::kFloat32);
  bucket.fill_(1.0f);
  const void* bucket_memory = bucket.data_ptr();
  at::Tensor shard = torch::empty({chunk});
  auto reduced = comm->reduce_scatter(bucket, shard, comm::ReduceOp::kSum);
  bucket.reset();  // the Work alone holds it now
  at::Tensor whole = torch::empty({world * chunk});
  const at::Tensor mine = torch::full({chunk}, static_cast<float>(rank));
  c10::DataPtr block;
  auto gathered = comm->allgather_filled(whole, [&] {
    block = pool.allocate(static_cast<size_t>(chunk) * sizeof(float), at::kCPU, *c10::GetCPUAllocator());
    whole.narrow(0, chunk * rank, chunk).copy_(mine);
  });
  gathered->wait();
  reduced->wait();
  EXPECT_EQ(block.get(), bucket_memory) << "the gather's memory is the reduced bucket's";
  EXPECT_TRUE(torch::equal(shard, torch::full({chunk}, static_cast<float>(world))));
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(torch::equal(whole.narrow(0, chunk * r, chunk), torch::full({chunk}, static_cast<float>(r)))) << r;
  }
  at::Tensor two_d = torch::empty({world, 2});
  EXPECT_THROW(comm->allgather_filled(two_d, [] {}), CommError);
}

TEST(ReplicaCheck, NamesExactlyTheRanksWhoseParametersDiffer) {
  auto comm = comm::make_communicator(config::Backend::kMpi, *testing::g_bootstrap, false, 0);
  std::vector<at::Tensor> parameters{torch::linspace(-1, 1, 50), torch::ones({3, 4})};
  EXPECT_TRUE(ddp::ranks_differing_from_root(*comm, parameters, at::kCPU).empty());
  // The last rank changes one bit of one value; with one rank nothing can differ.
  const int last = comm->size() - 1;
  if (comm->rank() == last && last > 0) {
    parameters[1].view(at::kInt)[2][1].add_(1);
  }
  const std::vector<int> differ = ddp::ranks_differing_from_root(*comm, parameters, at::kCPU);
  EXPECT_EQ(differ, last > 0 ? std::vector<int>{last} : std::vector<int>{});
}

// train.nonfinite needs no collective of its own: an inf or NaN in one rank's gradient makes the
// average non-finite on every rank, whichever dtype the buckets travel in.
TEST(NonfiniteAgreement, ANonFiniteGradientOnOneRankIsNonFiniteOnEveryRankAfterAveraging) {
  auto comm = comm::make_communicator(config::Backend::kMpi, *testing::g_bootstrap, false, 0);
  const int last = comm->size() - 1;
  for (const c10::ScalarType wire : {c10::ScalarType::Undefined, at::kHalf, at::kBFloat16}) {
    for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      std::vector<at::Tensor> parameters{torch::zeros({6}, torch::requires_grad()),
                                         torch::zeros({2, 3}, torch::requires_grad())};
      ddp::GradSyncOptions options;
      options.overlap = false;  // the gradients are set by hand, as if by a backward
      options.warn_unused = false;
      options.wire_dtype = wire;
      ddp::GradSync sync(*comm, parameters, options);
      for (auto& p : parameters) p.mutable_grad() = torch::full(p.sizes(), 0.5);
      if (comm->rank() == last) parameters[1].mutable_grad()[1][2] = bad;
      sync.begin_backward(/*last_micro_batch=*/true);
      sync.average_gradients();
      const std::vector<at::Tensor> gradients{parameters[0].grad(), parameters[1].grad()};
      EXPECT_FALSE(optim::all_finite(gradients)) << "rank " << comm->rank() << " wire " << wire << " " << bad;
      EXPECT_EQ(optim::first_nonfinite(gradients), 1);
      EXPECT_TRUE(optim::all_finite({gradients[0]}));
    }
  }
}

// Rank 0 waits for an allreduce the others join only after its timeout: rank 0 gets a CommError
// naming the operation and the limit; the late ranks then complete the collective, so every
// worker thread finishes and the communicators close normally.
TEST(MpiCommunicator, ACollectiveNotCompletedInTimeIsACommErrorNamingIt) {
  comm::Bootstrap& boot = *testing::g_bootstrap;
  auto comm = comm::make_communicator(config::Backend::kMpi, boot, false, 0, /*timeout_s=*/0.5);
  if (comm->size() == 1) GTEST_SKIP() << "needs a second rank to be late";
  at::Tensor values = torch::ones({4});
  if (comm->rank() == 0) {
    auto work = comm->allreduce(values, comm::ReduceOp::kSum);
    try {
      work->wait();
      ADD_FAILURE() << "no timeout";
    } catch (const CommError& e) {
      // Numbered, so a timeout on one rank can be set against what the others issued.
      EXPECT_NE(std::string(e.what()).find("MPI allreduce of 4 elements (collective #"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(" of this rank) did not complete within dist.timeout_s=0.5 s"),
                std::string::npos)
          << e.what();
    }
    // The late ranks' arrival completes it.
    for (int i = 0; i < 3000 && !work->is_completed(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(work->is_completed());
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    comm->allreduce(values, comm::ReduceOp::kSum)->wait();
  }
}

}  // namespace
}  // namespace hpctrain
