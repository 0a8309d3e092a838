// One function per subcommand; main() only dispatches. Each takes the arguments after the
// subcommand's name and returns the process exit code; user errors are thrown as hpctrain::Error.
// The commands that train are defined in src/cli, the others in src/tools, usage() and
// exit_with_error() here in src/launch: declarations only, so either library may include them.
#pragma once

#include <string>
#include <vector>

namespace hpctrain::cli {

using Args = std::vector<std::string>;

int run_train(const Args& args);
int run_eval(const Args& args);
int run_generate(const Args& args);
int run_forward(const Args& args);
int run_tokenize(const Args& args);
int run_sample(const Args& args);
int run_prepare(const Args& args);
int run_data(const Args& args);
int run_ckpt(const Args& args);
int run_bench(const Args& args);
int run_doctor(const Args& args);
int run_trace(const Args& args);
int run_docs(const Args& args);

// Top-level --help and --version.
std::string usage();
std::string versions();

// Prints "hpctrain: error: <message>" and ends the process with `exit_code`. While a multi-rank MPI
// job runs, the failing rank names itself and ends the whole job through MPI_Abort, so no rank
// waits. Before MPI starts, every rank fails the same way on the same inputs, so only rank 0
// prints. Never returns.
[[noreturn]] void exit_with_error(const std::string& message, int exit_code);

}  // namespace hpctrain::cli
