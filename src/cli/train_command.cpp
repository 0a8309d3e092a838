// `hpctrain train`: parse and check everything, then start MPI, create the run directory, train.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <vector>

#include "hpctrain/comm/flight_recorder.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/activity.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/stop_signals.h"
#include "hpctrain/core/system.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/launch/commands.h"
#include "hpctrain/runtime/run_lock.h"
#include "hpctrain/train/memory_check.h"
#include "hpctrain/train/option_checks.h"
#include "hpctrain/train/trainer.h"

namespace hpctrain::cli {

int run_train(const Args& args) {
  const std::vector<config::Flag> flags{{"print-config", false, "print the resolved config and exit"}};
  if (wants_help(args)) {
    std::cout << "usage: [mpirun -np N | srun] hpctrain train [--config FILE] [--section.key=value ...]\n"
                 "       hpctrain train --config FILE --print-config\n\n"
                 "Trains model.name on data.path data-parallel over all ranks. Options:\n"
              << config::options_help();
    return 0;
  }
  const config::ParsedArgs parsed = config::parse_args(args, flags, true, true);
  if (!parsed.positionals.empty()) {
    throw ConfigError("train: unexpected argument '" + parsed.positionals.front() +
                      "' (options are --section.key=value; see hpctrain train --help)");
  }
  const config::Config& config = parsed.config;
  const std::string resolved = config::to_ini(config);
  if (parsed.has("print-config")) {
    std::cout << resolved;
    return 0;
  }
  tune_allocators();
  init_early_logging(config.log);
  // Everything that can be wrong with the inputs fails here, on every rank alike, before MPI starts
  // and before anything is written.
  train::TrainingSetup setup = train::prepare_training(config, /*need_train_split=*/true);

  // What only the rank watch times, which needs two ranks or more (Note [Rank watch]).
  activity::set_limit(activity::Kind::kLoader, config.dist.timeout_s, "dist.timeout_s");
  if (config.ckpt.write_timeout_s > 0) {
    activity::set_limit(activity::Kind::kCheckpoint, config.ckpt.write_timeout_s, "ckpt.write_timeout_s");
  } else {
    activity::set_limit(activity::Kind::kCheckpoint, config.dist.timeout_s, "dist.timeout_s");
  }
  // All ranks agree on versions, config and GPU binding before anything is written.
  RankStart start = config_start(config, setup.use_cuda);
  start.whole_allocation = true;
  const Ranks ranks = start_ranks(start);
  const comm::Bootstrap* bootstrap = ranks.bootstrap.get();
  train::check_mpi_threads(config, bootstrap->thread_multiple());
  train::check_world_fits(setup, bootstrap->world_size());
  train::check_memory_fits(setup, *bootstrap);
  // From here a stop signal becomes a checkpoint and exit 75 at the next step boundary.
  const std::vector<int> stop_signals = sys::parse_signal_list(config.ckpt.signals);
  sys::install_stop_handlers(stop_signals);
  const runtime::RunDirectory run_dir(config.run.dir);
  // One job per run directory (Note [Run directory lock]): a second is refused before it writes.
  std::unique_ptr<runtime::RunLock> lock;
  if (bootstrap->world_rank() == 0) {
    runtime::RunLockOptions lock_options = runtime::default_lock_options(config.run.lock_stale_s);
    lock_options.on_lost = [](const std::string& what) { exit_with_error(what, static_cast<int>(ExitCode::kUsage)); };
    lock = runtime::RunLock::acquire(run_dir.root(), std::move(lock_options));
    run_dir.create();
  }
  bootstrap->barrier();
  comm::flight::configure(config.dist.flight_records, run_dir.flight_dir(), bootstrap->world_rank(),
                          config.dist.timeout_s);
  comm::flight::handle_usr2(std::count(stop_signals.begin(), stop_signals.end(), SIGUSR2) > 0);
  log::add_file(run_dir.log_path(bootstrap->world_rank()));
  log_banner(*bootstrap, ranks.threads);
  log::info("run directory {}", run_dir.root());

  train::Trainer trainer(std::move(setup), *ranks.bootstrap, *ranks.comm, ranks.device, run_dir);
  const train::TrainSummary summary = trainer.run();
  if (summary.stopped) {
    if (bootstrap->world_rank() == 0) {
      log::warn("stopped at step {} on a signal; checkpoint {} holds everything needed to continue: "
                "rerun the same command to resume (exit code {})",
                summary.steps, summary.checkpoint, static_cast<int>(ExitCode::kStopped));
    }
    log::shutdown();
    return static_cast<int>(ExitCode::kStopped);
  }
  if (!summary.failure.empty()) {
    // Every rank reached the same verdict from the same averaged gradients: one line, no abort.
    if (bootstrap->world_rank() == 0) std::fprintf(stderr, "hpctrain: error: %s\n", summary.failure.c_str());
    log::shutdown();
    return static_cast<int>(ExitCode::kNonfinite);
  }
  if (summary.last_eval && !summary.last_eval->has_accuracy) {
    log::info("done: {} steps, test loss {:.4f} (diffusion)", summary.steps, summary.last_eval->loss);
  } else if (summary.last_eval && summary.last_eval->language_model()) {
    log::info("done: {} steps, test loss {:.4f}, perplexity {:.2f}, next-token accuracy {:.4f}", summary.steps,
              summary.last_eval->loss, summary.last_eval->perplexity(), summary.last_eval->accuracy);
  } else if (summary.last_eval) {
    log::info("done: {} steps, test accuracy {:.4f}, test loss {:.4f}", summary.steps,
              summary.last_eval->accuracy, summary.last_eval->loss);
  } else {
    log::info("done: {} steps", summary.steps);
  }
  log::info("run directory: {}", run_dir.root());
  log::shutdown();
  return 0;
}

}  // namespace hpctrain::cli
