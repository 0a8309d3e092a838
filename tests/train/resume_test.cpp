// The pieces of a resume that need no MPI: the learning-rate schedule, which checkpoint ckpt.resume
// picks (with fallback), which config changes are refused, and the optimizer and generator states
// a checkpoint carries.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "hpctrain/model/model.h"
#include "hpctrain/optim/lr_schedule.h"
#include "hpctrain/optim/nonfinite.h"
#include "hpctrain/optim/optimizer.h"
#include "hpctrain/optim/train_state.h"
#include "hpctrain/train/resume_policy.h"
#include "hpctrain/train/resume_state.h"
#include "hpctrain/train/trainer.h"
#include "hpctrain/weights/model_weights.h"
#include "train/checkpoint_parts.h"

namespace hpctrain::train {
namespace {

namespace fs = std::filesystem;

TEST(LrSchedule, WarmupThenConstantOrCosine) {
  config::OptimConfig o;
  o.lr = 0.1;
  o.warmup_steps = 4;
  o.schedule = config::Schedule::kConstant;
  EXPECT_DOUBLE_EQ(optim::lr_at(o, o.lr, 0, 100), 0.025);
  EXPECT_DOUBLE_EQ(optim::lr_at(o, o.lr, 3, 100), 0.1);
  EXPECT_DOUBLE_EQ(optim::lr_at(o, o.lr, 50, 100), 0.1);
  o.schedule = config::Schedule::kCosine;
  EXPECT_DOUBLE_EQ(optim::lr_at(o, o.lr, 1, 104), 0.05);
  EXPECT_DOUBLE_EQ(optim::lr_at(o, o.lr, 4, 104), 0.1);                      // decay starts at the peak
  EXPECT_NEAR(optim::lr_at(o, o.lr, 54, 104), 0.05, 1e-12);                   // halfway
  EXPECT_NEAR(optim::lr_at(o, o.lr, 104, 104), 0.0, 1e-12);                   // the last step
  EXPECT_NEAR(optim::lr_at(o, o.lr, 200, 104), 0.0, 1e-12);                   // past it: stays at 0
  EXPECT_NEAR(optim::lr_at(o, o.lr, 29, 104), 0.05 * (1 + std::cos(M_PI * 0.25)), 1e-12);
}

class ResumePolicy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("hpctrain_resume_" + std::to_string(::getpid()))).string();
  }
  void TearDown() override { hpctrain::sys::remove_tree(dir_); }
  std::string write(std::int64_t step) {
    ckpt::Checkpoint c;
    c.meta.step = step;
    c.groups["model"] = {{"w", torch::randn({64, 64})}};
    return ckpt::write_checkpoint(dir_, c);
  }
  static void corrupt(const std::string& path) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(path) / 2));
    f.write("\xff\xfe\xfd\xfc", 4);
  }
  std::string dir_;
};

const config::ResumeFrom kAuto{config::ResumeFrom::Kind::kAuto, ""};
const config::ResumeFrom kNone{config::ResumeFrom::Kind::kNone, ""};
config::ResumeFrom path(const std::string& file) { return {config::ResumeFrom::Kind::kPath, file}; }

TEST_F(ResumePolicy, AutoTakesLatestFallsBackPastCorruptOnesAndStartsFreshOnlyWithoutAny) {
  EXPECT_EQ(choose_checkpoint(kAuto, dir_), "") << "no directory yet: fresh";
  const std::string first = write(10);
  const std::string second = write(20);
  EXPECT_EQ(choose_checkpoint(kAuto, dir_), second);
  EXPECT_EQ(choose_checkpoint(kNone, dir_), "");
  EXPECT_EQ(choose_checkpoint(path(first), dir_), first);
  corrupt(second);
  EXPECT_EQ(choose_checkpoint(kAuto, dir_), first) << "the corrupt newest is skipped";
  EXPECT_THROW(choose_checkpoint(path(second), dir_), CheckpointError) << "a named bad file is an error";
  fs::resize_file(first, fs::file_size(first) / 3);  // truncated
  EXPECT_THROW(choose_checkpoint(kAuto, dir_), CheckpointError) << "checkpoints exist, none verifies";
  EXPECT_THROW(choose_checkpoint(path(dir_ + "/ckpt-99.h5"), dir_), CheckpointError);
}

TEST(ResumeConfig, OnlyOptionsThatChangeTheComputationAreReported) {
  config::Config base = config::resolve("", {{"data.path", "/data"}});
  config::Config lengthened = config::resolve(
      "", {{"data.path", "/data"}, {"train.epochs", "9"}, {"log.every_steps", "7"}, {"ckpt.every_steps", "5"},
           {"run.dir", "elsewhere"}, {"data.loader_threads", "2"}, {"train.peak_tflops", "989.4"}});
  EXPECT_EQ(resume_config_changes(config::to_ini(base), config::to_ini(lengthened), {2, 2}), "");
  config::Config changed = config::resolve("", {{"data.path", "/data"}, {"optim.lr", "0.5"}, {"train.seed", "7"}});
  const std::string changes = resume_config_changes(config::to_ini(base), config::to_ini(changed), {2, 2});
  EXPECT_NE(changes.find("optim.lr 0.002 -> 0.5"), std::string::npos) << changes;
  EXPECT_NE(changes.find("train.seed 42 -> 7"), std::string::npos) << changes;
}

// A checkpoint written before an option existed resumes while the option keeps its default.
TEST(ResumeConfigChanges, OptionsNewerThanTheCheckpointMayKeepTheirDefault) {
  const config::Config base = config::resolve("", {{"data.path", "/data"}});
  std::string older = config::to_ini(base);
  const auto line = older.find("random_flip = ");
  ASSERT_NE(line, std::string::npos) << older;
  older.erase(line, older.find('\n', line) - line + 1);
  EXPECT_EQ(resume_config_changes(older, config::to_ini(base), {1, 1}), "");
  const config::Config flipped = config::resolve("", {{"data.path", "/data"}, {"data.random_flip", "true"}});
  EXPECT_EQ(resume_config_changes(older, config::to_ini(flipped), {1, 1}), "data.random_flip (none) -> true");
}

// A restart on fewer ranks sets train.global_batch to the checkpoint's global batch: accepted; a
// global batch that changes is reported, whichever option changed it.
TEST(ResumeConfigChanges, TheGlobalBatchMayBeReachedAnotherWayButNotChanged) {
  const auto ini = [](std::map<std::string, std::string> overrides) {
    overrides.emplace("data.path", "/data");
    overrides.emplace("train.batch_size", "8");
    return config::to_ini(config::resolve("", overrides));
  };
  const std::string four_ranks = ini({});  // 4 x 8 = 32 a step
  EXPECT_EQ(resume_config_changes(four_ranks, ini({{"train.global_batch", "32"}}), {4, 2}), "");
  EXPECT_EQ(resume_config_changes(four_ranks, ini({{"train.accum_steps", "2"}}), {4, 2}), "");
  EXPECT_EQ(resume_config_changes(ini({{"train.global_batch", "32"}}), four_ranks, {2, 4}), "");
  EXPECT_EQ(resume_config_changes(four_ranks, ini({{"train.global_batch", "64"}}), {4, 2}),
            "train.global_batch 0 -> 64");
  EXPECT_EQ(resume_config_changes(four_ranks, ini({{"train.accum_steps", "2"}}), {4, 4}),
            "train.accum_steps 1 -> 2");
  // The batch size changes what each rank's forward sees (batch norm): reported even when the global batch stays.
  EXPECT_EQ(resume_config_changes(four_ranks, ini({{"train.batch_size", "16"}}), {4, 2}), "train.batch_size 8 -> 16");
}

// k AdamW steps, the state saved and loaded into a fresh optimizer, then one more step on each:
// the parameters must agree to the bit. Also with the bias in a parameter group of its own
// (optim.decay_bias_and_norm=false), declared first, so the optimizer's order differs.
TEST(TrainState, OptimizerStateRoundTripsForAdamWAndSgd) {
  for (const std::string name : {"adamw", "sgd", "adamw-groups", "sgd-groups"}) {
    config::OptimConfig o;
    ASSERT_TRUE(config::parse_choice(name.substr(0, name.find('-')), o.name));
    o.decay_bias_and_norm = name.find("groups") == std::string::npos;
    o.lr = 0.01;
    o.weight_decay = 0.01;
    o.momentum = 0.9;
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.eps = 1e-8;
    torch::manual_seed(1);
    const at::Tensor w = torch::randn({3, 4}).set_requires_grad(true);
    const at::Tensor b = torch::randn({4}).set_requires_grad(true);
    const optim::NamedParameters named{{"b", b}, {"w", w}};
    auto optimizer = optim::make_optimizer(o, named);
    const std::vector<std::string> names = optim::names_in_optimizer_order(*optimizer, named);
    EXPECT_EQ(names, (o.decay_bias_and_norm ? std::vector<std::string>{"b", "w"} : std::vector<std::string>{"w", "b"}));
    const auto step = [&](torch::optim::Optimizer& opt, const at::Tensor& x, const at::Tensor& y) {
      opt.zero_grad();
      (x.matmul(w) + b).sub(y).square().sum().backward();
      opt.step();
    };
    const at::Tensor x = torch::randn({5, 3});
    const at::Tensor y = torch::randn({5, 4});
    EXPECT_TRUE(optim::optimizer_state(*optimizer, names).empty()) << "no state before the first step";
    for (int k = 0; k < 3; ++k) step(*optimizer, x, y);
    ckpt::NamedTensors saved = optim::optimizer_state(*optimizer, names);
    for (auto& entry : saved) entry.second = entry.second.clone();  // the live state moves on
    EXPECT_EQ(saved.size(), o.name == config::OptimizerName::kAdamW ? 6u : 2u) << name;

    const at::Tensor w_copy = w.detach().clone();
    const at::Tensor b_copy = b.detach().clone();
    step(*optimizer, x, y);
    const at::Tensor w_expected = w.detach().clone();
    {
      torch::NoGradGuard no_grad;
      w.copy_(w_copy);
      b.copy_(b_copy);
    }
    auto restored = optim::make_optimizer(o, named);
    optim::load_optimizer_state(*restored, names, saved);
    step(*restored, x, y);
    EXPECT_TRUE(torch::equal(w.detach(), w_expected)) << name;
  }
  config::OptimConfig o;
  o.name = config::OptimizerName::kSgd;
  o.lr = 0.1;
  const at::Tensor p = torch::zeros({2}).set_requires_grad(true);
  auto sgd = optim::make_optimizer(o, {{"p", p}});
  EXPECT_THROW(optim::load_optimizer_state(*sgd, {"p"}, {{"q/momentum_buffer", torch::zeros({2})}}), CheckpointError);
  EXPECT_THROW(optim::load_optimizer_state(*sgd, {"p"}, {{"p/momentum_buffer", torch::zeros({3})}}), CheckpointError);
}

// AdamW's state made before the first step, in two flat buffers, steps exactly as the state
// AdamW makes itself; SGD's momentum (the first gradient, not zeros) is left to SGD.
TEST(TrainState, AdamWStateMadeAheadInTwoBuffersStepsAsItsOwn) {
  config::OptimConfig o;
  o.name = config::OptimizerName::kAdamW;
  o.lr = 0.01;
  o.weight_decay = 0.01;
  torch::manual_seed(2);
  const at::Tensor x = torch::randn({5, 3});
  const at::Tensor y = torch::randn({5, 4});
  const at::Tensor w0 = torch::randn({3, 4});
  const at::Tensor b0 = torch::randn({4});
  std::vector<at::Tensor> trained;
  std::vector<std::int64_t> buffer_numels;
  for (const bool ahead : {false, true}) {
    const at::Tensor w = w0.clone().set_requires_grad(true);
    const at::Tensor b = b0.clone().set_requires_grad(true);
    const optim::NamedParameters named{{"w", w}, {"b", b}};
    auto optimizer = optim::make_optimizer(o, named);
    if (ahead) {
      optim::allocate_optimizer_state(*optimizer, [&](std::int64_t numel, const at::TensorOptions& options) {
        buffer_numels.push_back(numel);
        return at::zeros({numel}, options);
      });
      const ckpt::NamedTensors state = optim::optimizer_state(*optimizer, optim::names_in_optimizer_order(*optimizer, named));
      ASSERT_EQ(state.size(), 6u);
      const at::Tensor& w_average = state[1].second;
      const at::Tensor& b_average = state[4].second;
      EXPECT_EQ(state[0].second.item<std::int64_t>(), 0);
      EXPECT_EQ(static_cast<const float*>(b_average.data_ptr()), static_cast<const float*>(w_average.data_ptr()) + 12)
          << "one buffer, the parameters' moments one after another";
    }
    for (int k = 0; k < 4; ++k) {
      optimizer->zero_grad();
      (x.matmul(w) + b).sub(y).square().sum().backward();
      optimizer->step();
    }
    trained.push_back(torch::cat({w.detach().reshape({-1}), b.detach()}));
  }
  EXPECT_EQ(buffer_numels, (std::vector<std::int64_t>{16, 16}));
  EXPECT_TRUE(torch::equal(trained[0], trained[1]));
  o.name = config::OptimizerName::kSgd;
  o.momentum = 0.9;
  const at::Tensor p = torch::zeros({2}).set_requires_grad(true);
  auto sgd = optim::make_optimizer(o, {{"p", p}});
  optim::allocate_optimizer_state(*sgd, [](std::int64_t, const at::TensorOptions&) -> at::Tensor {
    ADD_FAILURE() << "SGD's state is not made ahead";
    return {};
  });
  EXPECT_TRUE(optim::optimizer_state(*sgd, {"p"}).empty());
}

// A checkpoint's AdamW state loaded where the state was made ahead fills its buffers in place:
// a resumed sharded run holds its moments as a fresh one does, out of the heap.
TEST(TrainState, LoadedAdamWStateFillsTheBuffersMadeAhead) {
  config::OptimConfig o;
  o.name = config::OptimizerName::kAdamW;
  o.lr = 0.01;
  torch::manual_seed(3);
  const at::Tensor w = torch::randn({3, 4}).set_requires_grad(true);
  const at::Tensor b = torch::randn({4}).set_requires_grad(true);
  const optim::NamedParameters named{{"w", w}, {"b", b}};
  auto trained = optim::make_optimizer(o, named);
  for (int k = 0; k < 2; ++k) {
    trained->zero_grad();
    (torch::randn({5, 3}).matmul(w) + b).square().sum().backward();
    trained->step();
  }
  const std::vector<std::string> names = optim::names_in_optimizer_order(*trained, named);
  const ckpt::NamedTensors stored = optim::optimizer_state(*trained, names);
  auto resumed = optim::make_optimizer(o, named);
  std::vector<at::Tensor> buffers;
  optim::allocate_optimizer_state(*resumed, [&](std::int64_t numel, const at::TensorOptions& options) {
    buffers.push_back(at::zeros({numel}, options));
    return buffers.back();
  });
  optim::load_optimizer_state(*resumed, names, stored);
  const ckpt::NamedTensors loaded = optim::optimizer_state(*resumed, names);
  ASSERT_EQ(loaded.size(), stored.size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_EQ(loaded[i].first, stored[i].first);
    EXPECT_TRUE(torch::equal(loaded[i].second, stored[i].second)) << loaded[i].first;
  }
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(loaded[1].second.data_ptr(), buffers[0].data_ptr()) << "w's exp_avg is the buffer made ahead";
  EXPECT_EQ(loaded[5].second.data_ptr(), static_cast<float*>(buffers[1].data_ptr()) + 12)
      << "b's exp_avg_sq, in the second buffer after w's";
}

// read_resume_state puts a checkpoint's state back into live objects; the 0-d entries, stored
// without a checksum, are range-checked, and a damaged one is an error naming file and entry.
TEST_F(ResumePolicy, ResumeStateComesBackAndDamagedScalarsAreRefused) {
  torch::manual_seed(2);
  config::ModelConfig m;
  m.name = config::ModelName::kMlp;
  m.mlp_hidden = "8";
  const std::shared_ptr<model::Model> net = model::make_model(m, model::ModelSpec{{1, 4, 4}, 3});
  config::OptimConfig o;
  o.name = config::OptimizerName::kSgd;
  o.lr = 0.1;
  o.momentum = 0.9;
  optim::NamedParameters named;
  for (auto& p : net->module().named_parameters()) named.emplace_back(p.key(), p.value());
  auto optimizer = optim::make_optimizer(o, named);
  const std::vector<std::string> names = optim::names_in_optimizer_order(*optimizer, named);
  optimizer->zero_grad();
  net->forward(torch::rand({2, 1, 4, 4})).sum().backward();
  optimizer->step();
  const auto write_with = [&](std::int64_t step, double best_accuracy) {
    ckpt::Checkpoint c;
    c.meta.step = step;
    c.meta.epoch = 1;
    c.meta.cursor = 6;
    c.groups["model"] = weights::model_state(*net);
    c.groups["optim"] = optim::optimizer_state(*optimizer, names);
    c.groups["sched"] = {{"skipped_steps", torch::full({}, 4, torch::kLong)}};
    c.groups["metrics"] = {{"best_test_acc", torch::full({}, best_accuracy, torch::kDouble)}};
    for (const auto& [name, state] : optim::rng_state(c10::Device(c10::kCPU))) c.groups["rng"].emplace_back("rank-0/" + name, state);
    return ckpt::write_checkpoint(dir_, c);
  };
  optim::SkippedSteps skipped(optim::NonfinitePolicy{});
  const auto load_optimizer = [&](const ckpt::CheckpointReader& r) {
    optim::load_optimizer_state(*optimizer, names, r.read_group("optim"));
  };
  const ResumeTargets targets{*net, load_optimizer, skipped};
  const ResumedState resumed = read_resume_state(ckpt::CheckpointReader(write_with(7, 0.5)), targets);
  EXPECT_EQ(resumed.step, 7);
  EXPECT_EQ(resumed.epoch, 1);
  EXPECT_EQ(resumed.cursor, 6);
  EXPECT_EQ(resumed.best_test_acc, 0.5);
  EXPECT_FALSE(resumed.best_test_loss);
  EXPECT_TRUE(resumed.generators_restored);
  EXPECT_FALSE(resumed.loss_scale_restored);
  EXPECT_EQ(skipped.total(), 4);
  EXPECT_EQ(optim::optimizer_state(*optimizer, names).size(), names.size());  // a momentum buffer each

  for (const auto& [step, accuracy, expected] :
       {std::tuple<std::int64_t, double, std::string>{-1, 0.5, "negative step, epoch or cursor"},
        {8, 1.5, "metrics/best_test_acc is 1.500000, not an accuracy"}}) {
    const std::string path = write_with(step, accuracy);
    try {
      read_resume_state(ckpt::CheckpointReader(path), targets);
      FAIL() << expected;
    } catch (const CheckpointError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

TEST(TrainState, GeneratorStateRoundTrips) {
  const c10::Device cpu(c10::kCPU);
  torch::manual_seed(5);
  torch::rand({10});
  const ckpt::NamedTensors state = optim::rng_state(cpu);
  ASSERT_EQ(state.size(), 1u);
  const at::Tensor expected = torch::rand({10});
  torch::manual_seed(99);
  optim::restore_rng_state(cpu, state);
  EXPECT_TRUE(torch::equal(torch::rand({10}), expected));
}

// The checkpoint's parts are listed once: every group a checkpoint may hold is one entry, with
// its save and its load, so the writer and the resume cannot disagree on what there is; the LoRA
// base is checked before the model is read into it.
TEST(CheckpointParts, EveryGroupIsOneEntryWithItsSaveAndItsLoad) {
  std::set<std::string> listed;
  for (const CheckpointPart& part : checkpoint_parts()) {
    EXPECT_TRUE(listed.insert(part.group).second) << part.group << " is listed twice";
    EXPECT_NE(part.save, nullptr) << part.group;
    EXPECT_NE(part.load, nullptr) << part.group;
  }
  EXPECT_EQ(listed, std::set<std::string>(std::begin(ckpt::kGroups), std::end(ckpt::kGroups)));
  EXPECT_EQ(std::string(checkpoint_parts().front().group), ckpt::group::kBase);
  for (const CheckpointPart& part : checkpoint_parts()) {
    const std::string group = part.group;
    EXPECT_EQ(part.per_rank, group == ckpt::group::kOptim || group == ckpt::group::kEma) << group;
  }
}

}  // namespace
}  // namespace hpctrain::train
