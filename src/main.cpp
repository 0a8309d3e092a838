// hpctrain's entry point: dispatch to a subcommand, and the one place that catches errors.
#include <iostream>

#include "hpctrain/core/error.h"
#include "hpctrain/launch/commands.h"

namespace {

using hpctrain::cli::Args;

int dispatch(int argc, char** argv) {
  const Args all(argv + 1, argv + argc);
  if (all.empty() || all[0] == "-h" || all[0] == "--help" || all[0] == "help") {
    std::cout << hpctrain::cli::usage();
    return all.empty() ? static_cast<int>(hpctrain::ExitCode::kUsage) : 0;
  }
  if (all[0] == "--version" || all[0] == "version") {
    std::cout << hpctrain::cli::versions();
    return 0;
  }
  const std::string command = all[0];
  const Args rest(all.begin() + 1, all.end());
  if (command == "train") return hpctrain::cli::run_train(rest);
  if (command == "eval") return hpctrain::cli::run_eval(rest);
  if (command == "generate") return hpctrain::cli::run_generate(rest);
  if (command == "forward") return hpctrain::cli::run_forward(rest);
  if (command == "tokenize") return hpctrain::cli::run_tokenize(rest);
  if (command == "sample") return hpctrain::cli::run_sample(rest);
  if (command == "prepare") return hpctrain::cli::run_prepare(rest);
  if (command == "data") return hpctrain::cli::run_data(rest);
  if (command == "ckpt") return hpctrain::cli::run_ckpt(rest);
  if (command == "bench") return hpctrain::cli::run_bench(rest);
  if (command == "doctor") return hpctrain::cli::run_doctor(rest);
  if (command == "docs") return hpctrain::cli::run_docs(rest);
  if (command == "trace") return hpctrain::cli::run_trace(rest);
  throw hpctrain::ConfigError("unknown command '" + command +
                              "' (commands: train, eval, generate, forward, tokenize, sample, prepare, data, ckpt, bench, doctor, trace, docs; see hpctrain --help)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const hpctrain::Error& e) {
    hpctrain::cli::exit_with_error(e.what(), static_cast<int>(e.code()));
  } catch (const std::exception& e) {
    hpctrain::cli::exit_with_error(std::string("internal error: ") + e.what(),
                                   static_cast<int>(hpctrain::ExitCode::kInternal));
  }
}
