// The golden check of the reducer: after k optimizer steps, W ranks x A micro-batches of B samples
// through GradSync leave the parameters of one process that trained on the same W*A*B samples per
// step, for SGD and AdamW, whatever the bucket size, with and without overlap.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/ddp/grad_sync.h"
#include "hpctrain/model/batch_norm.h"
#include "hpctrain/model/model.h"
#include "hpctrain/optim/optimizer.h"
#include "hpctrain/train/step_loss.h"
#include "mpi_fixture.h"

namespace hpctrain {
namespace {

constexpr std::int64_t kPerRank = 5;  // B
constexpr int kSteps = 3;             // k

struct Case {
  const char* name;
  const char* optimizer;
  std::int64_t bucket_bytes;
  int accum;  // A
  bool overlap;
  c10::ScalarType wire = c10::ScalarType::Undefined;  // gradient compression
  double tolerance = 1e-5;                            // relative, on the parameters
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::shared_ptr<model::Model> seeded_mlp() {
  torch::manual_seed(99);  // identical initial weights everywhere
  config::ModelConfig c;
  c.name = config::ModelName::kMlp;
  c.mlp_hidden = "32,16";
  c.dropout = 0.0;
  return model::make_model(c, {{1, 6, 6}, 5});
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name, model::Model& net) {
  config::OptimConfig o;
  EXPECT_TRUE(config::parse_choice(name, o.name)) << name;
  o.lr = 0.05;
  o.weight_decay = 0.01;
  o.momentum = 0.9;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.eps = 1e-8;
  optim::NamedParameters named;
  for (const auto& p : net.module().named_parameters()) named.emplace_back(p.key(), p.value());
  return optim::make_optimizer(o, named);
}

at::Tensor flat_parameters(model::Model& net) {
  std::vector<at::Tensor> parts;
  for (const auto& p : net.module().parameters()) parts.push_back(p.detach().reshape({-1}));
  return torch::cat(parts);
}

// The single-process reference: kSteps steps, each on `global` consecutive samples.
void train_on_whole_batches(model::Model& net, const std::string& optimizer_name, const at::Tensor& inputs,
                            const at::Tensor& targets, std::int64_t global) {
  auto optimizer = make_optimizer(optimizer_name, net);
  for (int step = 0; step < kSteps; ++step) {
    optimizer->zero_grad();
    torch::nn::functional::cross_entropy(net.forward(inputs.narrow(0, step * global, global)),
                                         targets.narrow(0, step * global, global))
        .backward();
    optimizer->step();
  }
}

class BucketedEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(BucketedEquivalence, RanksTimesMicroBatchesEqualOneProcessOnTheWholeBatch) {
  const Case& c = GetParam();
  auto comm = comm::make_communicator(config::Backend::kMpi, *testing::g_bootstrap, false, 0);
  const int world = comm->size();
  const int rank = comm->rank();
  const std::int64_t global = world * c.accum * kPerRank;  // samples per optimizer step
  torch::manual_seed(1234);  // the same data on every rank; each takes its own rows
  const at::Tensor inputs = torch::randn({kSteps * global, 1, 6, 6});
  const at::Tensor targets = torch::randint(0, 5, {kSteps * global}, torch::kLong);

  auto net = seeded_mlp();
  auto optimizer = make_optimizer(c.optimizer, *net);
  ddp::GradSyncOptions options;
  options.bucket_bytes = c.bucket_bytes;
  options.overlap = c.overlap;
  options.wire_dtype = c.wire;
  ddp::GradSync sync(*comm, net->module().parameters(), options);
  for (int step = 0; step < kSteps; ++step) {
    optimizer->zero_grad();
    for (int a = 0; a < c.accum; ++a) {
      const std::int64_t first = step * global + (a * world + rank) * kPerRank;
      const at::Tensor losses = torch::nn::functional::cross_entropy(
          net->forward(inputs.narrow(0, first, kPerRank)), targets.narrow(0, first, kPerRank),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
      sync.begin_backward(a + 1 == c.accum);
      train::step_loss(losses, torch::ones({kPerRank}), world, global).backward();
    }
    sync.average_gradients();
    optimizer->step();
  }
  const at::Tensor distributed = flat_parameters(*net);

  auto reference = seeded_mlp();
  train_on_whole_batches(*reference, c.optimizer, inputs, targets, global);
  const at::Tensor expected = flat_parameters(*reference);
  const at::Tensor initial = flat_parameters(*seeded_mlp());

  const double relative = (distributed - expected).norm().item<double>() / expected.norm().item<double>();
  EXPECT_LE(relative, c.tolerance) << c.name << ", rank " << rank << " of " << world;
  EXPECT_GT((expected - initial).norm().item<double>(), 1e-3) << "the reference did not train";
  // Every replica holds the same parameters, bit for bit.
  at::Tensor rank0 = distributed.clone();
  comm->broadcast(rank0, 0)->wait();
  EXPECT_TRUE(torch::equal(rank0, distributed)) << c.name << ": rank " << rank << " differs from rank 0";
  EXPECT_TRUE(sync.last_unused().empty());
}

// Compressed cases use SGD, whose update is linear in the gradient: AdamW divides by the root of
// the squared gradient, so a 16-bit rounding that flips the sign of a near-zero gradient moves that
// weight by a whole learning rate (bf16 at -np 3 gave 8 % after 3 steps).
// The mlp's parameters hold 1152, 32, 512, 16, 80 and 5 floats: 2 KiB buckets split the
// neighbours of a parameter across buckets, 4 bytes make one bucket per parameter.
INSTANTIATE_TEST_SUITE_P(
    Table, BucketedEquivalence,
    ::testing::Values(Case{"sgd_one_bucket", "sgd", std::int64_t{25} << 20, 1, true},
                      Case{"sgd_split_buckets", "sgd", 2048, 1, true},
                      Case{"sgd_bucket_per_parameter", "sgd", 4, 1, true},
                      Case{"adamw_split_buckets", "adamw", 2048, 1, true},
                      Case{"adamw_no_overlap", "adamw", 2048, 1, false},
                      Case{"sgd_accumulate_3", "sgd", 2048, 3, true},
                      Case{"adamw_accumulate_2_bucket_per_parameter", "adamw", 4, 2, true},
                      Case{"sgd_fp16_on_the_wire", "sgd", 2048, 2, true, at::kHalf, 1e-2},
                      Case{"sgd_bf16_on_the_wire", "sgd", 2048, 1, true, at::kBFloat16, 1e-2}),
    [](const ::testing::TestParamInfo<Case>& param_info) { return std::string(param_info.param.name); });

// dist.sync_bn: W ranks x B samples with BatchNorm statistics reduced over the ranks train
// fashion_cnn to the parameters and running statistics of one process with torch's BatchNorm on
// the W*B samples.
TEST(SyncBatchNorm, RanksEqualOneProcessWithBatchNormOnTheWholeBatch) {
  auto comm = comm::make_communicator(config::Backend::kMpi, *testing::g_bootstrap, false, 0);
  const int world = comm->size();
  const int rank = comm->rank();
  constexpr std::int64_t kBatch = 3;
  const std::int64_t global = world * kBatch;
  torch::manual_seed(77);
  const at::Tensor inputs = torch::randn({kSteps * global, 1, 28, 28}) * 2 + 0.5;
  const at::Tensor targets = torch::randint(0, 10, {kSteps * global}, torch::kLong);
  config::ModelConfig c;
  c.name = config::ModelName::kFashionCnn;
  c.dropout = 0.0;
  const auto make_cnn = [&] {
    torch::manual_seed(5);
    return model::make_model(c, {{1, 28, 28}, 10});
  };

  auto net = make_cnn();
  ASSERT_EQ(model::set_batch_stats_reducer(net->module(), [&](at::Tensor& stats) {
              comm->allreduce(stats, comm::ReduceOp::kSum)->wait();
            }), 2);
  auto optimizer = make_optimizer("sgd", *net);
  ddp::GradSync sync(*comm, net->module().parameters(), {});
  net->module().train();
  for (int step = 0; step < kSteps; ++step) {
    optimizer->zero_grad();
    const std::int64_t first = step * global + rank * kBatch;
    const at::Tensor losses = torch::nn::functional::cross_entropy(
        net->forward(inputs.narrow(0, first, kBatch)), targets.narrow(0, first, kBatch),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    sync.begin_backward(true);
    train::step_loss(losses, torch::ones({kBatch}), world, global).backward();
    sync.average_gradients();
    optimizer->step();
  }

  auto reference = make_cnn();
  reference->module().train();
  train_on_whole_batches(*reference, "sgd", inputs, targets, global);
  const at::Tensor expected = flat_parameters(*reference);
  const double relative =
      (flat_parameters(*net) - expected).norm().item<double>() / expected.norm().item<double>();
  EXPECT_LE(relative, 1e-5) << "rank " << rank << " of " << world;
  EXPECT_GT((expected - flat_parameters(*make_cnn())).norm().item<double>(), 1e-3) << "did not train";
  const auto expected_buffers = reference->module().named_buffers();
  for (const auto& b : net->module().named_buffers()) {
    EXPECT_TRUE(torch::allclose(b.value().to(torch::kDouble), expected_buffers[b.key()].to(torch::kDouble),
                                1e-4, 1e-6))
        << b.key() << " on rank " << rank;
  }
}

}  // namespace
}  // namespace hpctrain
