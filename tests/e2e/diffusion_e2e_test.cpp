// train.objective=diffusion with model.name=unet through the real executable: at -np 2 the loss
// falls, evaluations report the diffusion loss alone, a stopped run resumes to the bit (and at
// ZeRO stage 3, level by level, within rounding), and a resume at -np 1 continues with the same
// draws (docs/diffusion.md); the unet is the one its
// PyTorch twin declares (tests/support/unet_reference.py); hpctrain sample writes the same images
// at any rank count.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>

#include "e2e.h"
#include "process.h"
#include "same_checkpoints.h"
#include "hpctrain/core/system.h"
#include "hpctrain/model/model.h"
#include "hpctrain/weights/weight_file.h"

namespace hpctrain::testing {
namespace {

class DiffusionEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const FashionSuite suite = make_fashion_suite("diffusion", 600, 2);
    work_ = suite.work;
    data_ = suite.data;
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  // configs/fashion_ddpm.ini at a test's size: a 16-channel unet of two levels, 32 samples per
  // rank and step, a checkpoint every step.
  static std::string train(int ranks, const std::string& run, const std::string& extra) {
    return mpirun(ranks) + kBin + " train --config " + kSource + "/configs/fashion_ddpm.ini --data.path=" + data_ +
           " --run.dir=" + work_ + "/" + run + " --train.threads=1 --data.eval_split= --train.batch_size=32" +
           " --model.unet_channels=16 --model.unet_mults=1,2 --optim.lr=0.002 --optim.warmup_steps=5" +
           " --train.ema_decay=0.9 --train.epochs=100 --log.every_steps=4 --ckpt.every_steps=1 --ckpt.keep_last=0 " +
           extra;
  }
  static std::vector<double> losses(const std::string& run) {
    std::vector<double> out;
    for (const auto& record : read_jsonl(work_ + "/" + run + "/metrics.jsonl")) {
      if (record.contains("loss")) out.push_back(record["loss"].get<double>());
    }
    return out;
  }

  static std::string work_;
  static std::string data_;
};

std::string DiffusionEndToEnd::work_;
std::string DiffusionEndToEnd::data_;

TEST_F(DiffusionEndToEnd, TheLossFallsAndAStoppedRunResumesToTheBit) {
  const ProcessResult whole = run_command(train(2, "whole", "--train.max_steps=24 --data.eval_split=test"));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const std::vector<double> curve = losses("whole");
  ASSERT_GE(curve.size(), 6u) << whole.err;  // every 4 steps, and at each epoch's end
  // Predicting no noise scores about 1 (the noise has unit variance); learning takes it well below.
  EXPECT_GT(curve.front(), 0.5) << whole.err;
  EXPECT_LT(curve.back(), 0.6 * curve.front()) << whole.err;
  // Evaluations score the diffusion loss alone.
  bool evaluated = false;
  for (const auto& record : read_jsonl(work_ + "/whole/metrics.jsonl")) {
    if (!record.contains("test_loss")) continue;
    evaluated = true;
    EXPECT_FALSE(record.contains("test_acc")) << record.dump();
  }
  EXPECT_TRUE(evaluated) << whole.err;
  EXPECT_EQ(count_lines_with(whole.err, "test_loss"), 3) << whole.err;  // after epochs 1, 2 and the last step
  EXPECT_EQ(count_lines_with(whole.err, "(diffusion)"), 4) << whole.err;  // and the run's last line

  const ProcessResult first = run_command(train(2, "split", "--train.max_steps=11"));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const ProcessResult second = run_command(train(2, "split", "--train.max_steps=24"));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  expect_same_tensors(work_ + "/whole/checkpoints/ckpt-24.h5", work_ + "/split/checkpoints/ckpt-24.h5",
                      {"model", "optim", "ema"});

  // ZeRO stage 3 with a unit per level (tiny buckets), stopped and resumed: the same run within
  // the rounding of the clipping norm, summed over shards; the moving average kept in shares.
  const std::string three = " --dist.zero_stage=3 --dist.bucket_mb=0.01";
  const ProcessResult third = run_command(train(2, "three", "--train.max_steps=11" + three));
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(count_lines_with(third.err, "(dist.zero_stage=3, its share of 2 rank(s))"), 1) << third.err;
  const ProcessResult resumed = run_command(train(2, "three", "--train.max_steps=24" + three));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  for (const char* group : {"model", "optim", "ema"}) {
    EXPECT_LT(relative_difference(work_ + "/whole/checkpoints/ckpt-24.h5", work_ + "/three/checkpoints/ckpt-24.h5",
                                  group),
              1e-5)
        << group;
  }

  // hpctrain eval: the same diffusion loss at one rank as training's last evaluation at two.
  const ProcessResult eval = run_command(kBin + " eval --checkpoint " + work_ + "/whole/checkpoints/ckpt-24.h5" +
                                         " --config " + kSource + "/configs/fashion_ddpm.ini --data.path=" + data_ +
                                         " --train.threads=1 --model.unet_channels=16 --model.unet_mults=1,2");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_EQ(count_lines_with(eval.err, "test_loss"), 1) << eval.err;
  EXPECT_EQ(count_lines_with(eval.err, "(diffusion)"), 1) << eval.err;
}

// Each sample's step, noise and dropped class come from (seed, epoch, index): at -np 1 with the
// same global batch the run continues with the very draws -np 2 made, so it ends where the -np 2
// run ends but for the order of the gradient sums.
TEST_F(DiffusionEndToEnd, AResumeAtAnotherWorldSizeContinuesWithTheSameDraws) {
  const ProcessResult whole = run_command(train(2, "two", "--train.max_steps=16"));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const ProcessResult one = run_command(train(1, "one", "--train.max_steps=16 --train.global_batch=64 --ckpt.resume=" +
                                                            work_ + "/two/checkpoints/ckpt-8.h5"));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(count_lines_with(one.err, "global batch 64 (1 ranks x 2 micro-batch(es) x 32)"), 1) << one.err;
  const std::string a = work_ + "/two/checkpoints/ckpt-16.h5";
  const std::string b = work_ + "/one/checkpoints/ckpt-16.h5";
  EXPECT_LT(relative_difference(a, b, "model"), 1e-4);
  // Other draws (another seed) end far from it: the comparison above can tell.
  const ProcessResult other = run_command(train(1, "other", "--train.max_steps=16 --train.global_batch=64 "
                                                            "--train.seed=7 --ckpt.allow_config_change=true --ckpt.resume=" +
                                                            work_ + "/two/checkpoints/ckpt-8.h5"));
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_GT(relative_difference(a, work_ + "/other/checkpoints/ckpt-16.h5", "model"), 1e-3);
}

// The twin's state_dict loads by name, in the same order, and both predict the same noise.
TEST_F(DiffusionEndToEnd, ThePyTorchTwinsWeightsLoadByNameAndPredictTheSameNoise) {
  const std::string dir = work_ + "/twin";
  const ProcessResult made = run_command("/usr/bin/python3 " + kSource + "/tests/support/unet_reference.py make " +
                                         dir + " --channels 8 --mults 1,2,2 --attention --classes 10");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  config::ModelConfig config;
  config.name = config::ModelName::kUnet;
  config.unet_channels = 8;
  config.unet_mults = "1,2,2";
  config.unet_attention = true;
  config.dropout = 0.0;
  const auto net = model::make_model(config, {{1, 28, 28}, 10});
  net->module().eval();
  auto parameters = net->module().named_parameters();
  const weights::WeightFile twin = weights::WeightFile::open(dir + "/unet.pt");
  ASSERT_EQ(twin.tensors().size(), parameters.size());
  const torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const auto& [name, tensor] = twin.tensors()[i];
    ASSERT_EQ(parameters.keys()[i], name) << i;
    ASSERT_EQ(parameters[name].sizes(), tensor.sizes()) << name;
    parameters[name].copy_(tensor);
  }
  std::map<std::string, at::Tensor> expected;
  const weights::WeightFile reference = weights::WeightFile::open(dir + "/expected.pt");
  for (const auto& [name, tensor] : reference.tensors()) expected[name] = tensor;
  const at::Tensor noise = net->predict_noise(expected.at("noisy"), expected.at("steps"), expected.at("labels"));
  EXPECT_TRUE(at::allclose(noise, expected.at("noise"), 1e-4, 1e-5))
      << (noise - expected.at("noise")).abs().max().item<double>();
}

// A PNG's width and height, from its IHDR chunk (big-endian, at bytes 16 and 20).
std::pair<std::uint32_t, std::uint32_t> png_size(const std::string& path) {
  const std::string bytes = read_file(path);
  EXPECT_EQ(bytes.substr(1, 3), "PNG") << path;
  const auto at = [&](std::size_t offset) {
    std::uint32_t value = 0;
    for (std::size_t k = 0; k < 4; ++k) value = value << 8 | static_cast<unsigned char>(bytes.at(offset + k));
    return value;
  };
  return {at(16), at(20)};
}

TEST_F(DiffusionEndToEnd, SampleWritesTheSameImagesAtAnyRankCount) {
  const ProcessResult trained = run_command(train(2, "sampled", "--train.max_steps=6"));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string checkpoint = work_ + "/sampled/checkpoints/ckpt-6.h5";
  const auto sample = [&](int ranks, const std::string& out, const std::string& extra) {
    return run_command(mpirun(ranks) + kBin + " sample --checkpoint " + checkpoint + " --out " + work_ + "/" + out +
                       " --steps 8 --batch-size 5 --seed 3 " + extra);
  };
  const ProcessResult two = sample(2, "two-ranks", "--per-class 2 --guidance 2 --dataset");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(count_lines_with(two.err, "sample: 20 image(s) by ddim on 2 rank(s), 8 steps, guidance 2"), 1) << two.err;
  const ProcessResult one = sample(1, "one-rank", "--per-class 2 --guidance 2");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(work_ + "/two-ranks")) {
    const std::string name = entry.path().filename().string();
    if (name == "dataset") continue;  // checked below
    EXPECT_EQ(read_file(entry.path().string()), read_file(work_ + "/one-rank/" + name)) << name;
    ++files;
  }
  EXPECT_EQ(files, 21);  // 2 of each of 10 classes, and the grid
  EXPECT_EQ(png_size(work_ + "/two-ranks/sample-00019-class-9.png"), std::make_pair(28u, 28u));
  // One row per class, 2 pixels between images.
  EXPECT_EQ(png_size(work_ + "/two-ranks/grid.png"), std::make_pair(2u * 30 - 2, 10u * 30 - 2));

  // The dataset --dataset wrote: 20 images labelled with their classes, which a classifier scores.
  const ProcessResult inspect = run_command(kBin + " data inspect " + work_ + "/two-ranks/dataset --verify");
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err << inspect.out;
  EXPECT_NE(inspect.out.find("split samples: 20 samples in 1 shard(s)"), std::string::npos) << inspect.out;
  const ProcessResult classifier = run_command(
      kBin + " train --config " + kSource + "/configs/fashion_cnn.ini --data.path=" + data_ + " --run.dir=" + work_ +
      "/classifier --train.threads=1 --data.eval_split= --train.max_steps=2");
  ASSERT_EQ(classifier.exit_code, 0) << classifier.err;
  const ProcessResult scored = run_command(kBin + " eval --checkpoint " + work_ + "/classifier/checkpoints/ckpt-2.h5" +
                                           " --config " + kSource + "/configs/fashion_cnn.ini --data.path=" + work_ +
                                           "/two-ranks/dataset --data.eval_split=samples --train.threads=1");
  ASSERT_EQ(scored.exit_code, 0) << scored.err;
  EXPECT_EQ(count_lines_with(scored.err, "samples: 20 samples, test_loss"), 1) << scored.err;

  const ProcessResult ddpm = sample(2, "ddpm", "--count 3 --class 4 --sampler ddpm");
  ASSERT_EQ(ddpm.exit_code, 0) << ddpm.err;
  EXPECT_TRUE(std::filesystem::exists(work_ + "/ddpm/sample-00002-class-4.png"));
  EXPECT_NE(read_file(work_ + "/ddpm/sample-00000-class-4.png"), read_file(work_ + "/one-rank/sample-00008-class-4.png"));

  const ProcessResult no_class = sample(1, "bad", "--class 10");
  EXPECT_EQ(no_class.exit_code, 2) << no_class.err;
  EXPECT_NE(no_class.err.find("--class 10 is not one of the dataset's 10 classes (0 to 9)"), std::string::npos)
      << no_class.err;
  const ProcessResult too_many =
      run_command(kBin + " sample --checkpoint " + checkpoint + " --out " + work_ + "/bad --steps 2000");
  EXPECT_EQ(too_many.exit_code, 2) << too_many.err;
  EXPECT_NE(too_many.err.find("--steps must be in [1, 1000]"), std::string::npos) << too_many.err;
  EXPECT_FALSE(std::filesystem::exists(work_ + "/bad")) << "an error before sampling left a directory";
}

}  // namespace
}  // namespace hpctrain::testing
