// `hpctrain eval`: load a checkpoint into the configured model and score the eval split.
#include <torch/nn/module.h>

#include <iostream>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/log.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/launch/commands.h"
#include "hpctrain/model/model.h"
#include "hpctrain/train/evaluator.h"
#include "hpctrain/train/trainer.h"
#include "hpctrain/weights/lora_base.h"

namespace hpctrain::cli {

int run_eval(const Args& args) {
  const std::vector<config::Flag> flags{{"checkpoint", true, "checkpoint file (.h5) to evaluate"}};
  if (wants_help(args)) {
    std::cout << "usage: [mpirun -np N] hpctrain eval --checkpoint FILE --config FILE "
                 "[--section.key=value ...]\n\n"
                 "Loads FILE into the model the config describes and reports test loss and accuracy\n"
                 "on data.eval_split (a language model: loss, perplexity and next-token accuracy).\n"
                 "A checkpoint of a run with train.ema_decay is scored with its moving average.\n"
                 "Options:\n"
              << config::options_help();
    return 0;
  }
  const config::ParsedArgs parsed = config::parse_args(args, flags, true, true);
  if (!parsed.has("checkpoint") || parsed.flags.at("checkpoint").empty()) {
    throw ConfigError("eval: --checkpoint FILE is required");
  }
  if (parsed.config.data.eval_split.empty()) {
    throw ConfigError("eval: data.eval_split is empty; name the split to evaluate");
  }
  const std::string path = parsed.flags.at("checkpoint");
  tune_allocators();
  init_early_logging(parsed.config.log);
  train::TrainingSetup setup = train::prepare_training(parsed.config, /*need_train_split=*/false);
  const ckpt::CheckpointReader reader(path);
  weights::read_checkpoint_weights(reader, *setup.model, setup.config.model, weights::Weights::kAverageIfKept);
  const ckpt::CheckpointMeta& meta = reader.meta();

  const Ranks ranks = start_ranks(config_start(parsed.config, setup.use_cuda));
  log_banner(*ranks.bootstrap, ranks.threads);
  setup.model->module().to(ranks.device);
  const train::EvalResult result =
      train::evaluate(*setup.model, *train::make_objective(setup.config), *setup.eval, *ranks.comm,
                      parsed.config.train.eval_batch_size, ranks.device);
  log::info("checkpoint {} (step {}, epoch {}, model {})", path, meta.step, meta.epoch, meta.model_name);
  if (!result.has_accuracy) {
    log::info("{}: {} samples, test_loss {:.4f} (diffusion)", parsed.config.data.eval_split, result.samples,
              result.loss);
  } else if (result.language_model()) {
    log::info("{}: {} tokens, test_loss {:.4f}, test_ppl {:.2f}, test_acc {:.4f} (next token)",
              parsed.config.data.eval_split, result.tokens, result.loss, result.perplexity(), result.accuracy);
  } else {
    log::info("{}: {} samples, test_loss {:.4f}, test_acc {:.4f}", parsed.config.data.eval_split,
              result.samples, result.loss, result.accuracy);
  }
  log::shutdown();
  return 0;
}

}  // namespace hpctrain::cli
