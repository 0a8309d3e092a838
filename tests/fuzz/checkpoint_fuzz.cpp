// The checkpoint reader: a checkpoint file as a resume reads it into a live model, optimizer,
// skipped-step count, loss scaler and generators (train/resume_state.h), after comparing its
// config with the run's, as a rank of a sharded optimizer reads its elements of the optimizer
// state, and as `hpctrain ckpt verify` reads every tensor of it.
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "fuzz_target.h"
#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/model/model.h"
#include "hpctrain/optim/loss_scaler.h"
#include "hpctrain/optim/nonfinite.h"
#include "hpctrain/optim/optimizer.h"
#include "hpctrain/optim/train_state.h"
#include "hpctrain/sharding/weight_average.h"
#include "hpctrain/train/resume_policy.h"
#include "hpctrain/train/resume_state.h"
#include "hpctrain/train/trainer.h"
#include "hpctrain/weights/model_weights.h"

namespace hpctrain::fuzz {

namespace {

// A small mlp with AdamW state after one step, a loss scaler, a moving average of its weights and
// a best accuracy: every group a checkpoint can hold.
struct Run {
  std::string config_ini = config::to_ini(config::resolve("", {{"model.name", "mlp"}, {"model.mlp_hidden", "8"}},
                                                          /*require_complete=*/false));
  std::shared_ptr<model::Model> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<std::string> parameter_names;
  optim::SkippedSteps skipped{optim::NonfinitePolicy{}};
  optim::LossScaler loss_scaler;
  std::optional<sharding::WeightAverage> average;
  std::optional<sharding::WeightAverage> average_share;  // a sharded rank's: the last elements of each weight

  Run() {
    torch::manual_seed(3);
    config::ModelConfig m;
    m.name = config::ModelName::kMlp;
    m.mlp_hidden = "8";
    model = model::make_model(m, model::ModelSpec{{1, 4, 4}, 3});
    config::OptimConfig o;
    o.name = config::OptimizerName::kAdamW;
    o.lr = 1e-3;
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.eps = 1e-8;
    optim::NamedParameters named;
    for (auto& p : model->module().named_parameters()) named.emplace_back(p.key(), p.value());
    optimizer = optim::make_optimizer(o, named);
    parameter_names = optim::names_in_optimizer_order(*optimizer, named);
    optimizer->zero_grad();
    model->forward(torch::rand({2, 1, 4, 4})).sum().backward();
    optimizer->step();
    average.emplace(sharding::whole_slices(weights::averaged_parameters(*model)), 0.9, /*sharded=*/false);
    ckpt::TensorSlices share;
    for (const auto& [name, weight] : weights::averaged_parameters(*model)) {
      const std::int64_t count = std::min<std::int64_t>(weight.numel(), 3);
      const std::int64_t first = weight.numel() - count;
      share.push_back({name, weight.sizes().vec(), first, weight.detach().view({-1}).narrow(0, first, count)});
    }
    average_share.emplace(std::move(share), 0.9, /*sharded=*/true);
  }

  std::string write(const std::string& dir) {
    ckpt::Checkpoint checkpoint;
    checkpoint.meta.step = 1;
    checkpoint.meta.model_name = "mlp";
    checkpoint.meta.config_text = config_ini;
    checkpoint.groups["model"] = weights::model_state(*model);
    checkpoint.groups["optim"] = optim::optimizer_state(*optimizer, parameter_names);
    checkpoint.groups["sched"] = skipped.state();
    checkpoint.groups["sched"].emplace_back("step", torch::full({}, 1, torch::kInt64));
    checkpoint.groups["loss_scaler"] = loss_scaler.state();
    average->add_to(checkpoint);
    checkpoint.groups["metrics"] = {{"best_test_acc", torch::full({}, 0.5, torch::kDouble)}};
    for (auto& [name, state] : optim::rng_state(c10::Device(c10::kCPU))) {
      checkpoint.groups["rng"].emplace_back("rank-0/" + name, state);
    }
    return ckpt::write_checkpoint(dir, checkpoint);
  }
};

Run& run() {
  static Run the_run;
  return the_run;
}

}  // namespace

void write_seeds(const std::string& dir) {
  const std::string written = run().write(scratch_dir() + "/seed-checkpoints");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(written, dir + "/mlp-adamw-scaler.h5", std::filesystem::copy_options::overwrite_existing);
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  static const std::string path = [] {
    fuzz::silence_logs();
    return fuzz::scratch_dir() + "/ckpt-1.h5";
  }();
  fuzz::Run& run = fuzz::run();
  fuzz::write_file(path, data, size);
  try {
    const ckpt::CheckpointReader reader(path);
    (void)train::resume_config_changes(reader.meta().config_text, run.config_ini, {reader.meta().world_size, 2});
    const auto load_optimizer = [&run](const ckpt::CheckpointReader& r) {
      optim::load_optimizer_state(*run.optimizer, run.parameter_names, r.read_group("optim"));
    };
    train::read_resume_state(reader, train::ResumeTargets{*run.model, load_optimizer, run.skipped, &run.loss_scaler, &*run.average});
    // What a rank of a sharded optimizer reads: its elements of each state, by range.
    for (const std::string& name : run.parameter_names) {
      if (!reader.has("optim", name + "/exp_avg")) continue;
      std::int64_t elements = 1;
      for (const std::int64_t d : reader.stored_shape("optim", name + "/exp_avg")) elements *= d;
      const std::int64_t count = std::min<std::int64_t>(elements, 3);  // the last ones
      reader.read_slice("optim", name + "/exp_avg", elements - count, at::empty({count}, at::kFloat));
    }
    if (reader.has_group("ema")) run.average_share->load(reader);  // by range, as a sharded rank reads it
    reader.verify();
    fuzz::record(fuzz::Outcome::kAccepted);
  } catch (const Error& e) {
    if (e.code() != ExitCode::kCheckpoint) throw;
    fuzz::record(fuzz::Outcome::kRefused);  // with a message: what a user sees
  }
  fuzz::expect_no_open_hdf5_objects();
  return 0;
}
