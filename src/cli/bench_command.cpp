// `hpctrain bench <what>`: dispatch to one measurement (bench_data.cpp, bench_comm.cpp,
// bench_step.cpp).
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "bench.h"
#include "hpctrain/cli/commands.h"
#include "hpctrain/core/error.h"
#include "runtime.h"

namespace hpctrain::cli {

int run_bench(const Args& args) {
  // Each measurement's own flags, so a flag of another one is refused rather than ignored.
  const std::map<std::string, std::vector<config::Flag>> flags{
      {"data",
       {{"data", true, ""}, {"split", true, ""}, {"batch-size", true, ""}, {"repeats", true, ""},
        {"cache-mb", true, ""}, {"io", false, ""}, {"shuffle-window-mb", true, ""}, {"cold", false, ""}, {"data-io", true, ""},
        {"prefetch", true, ""}}},
      {"comm",
       {{"backend", true, ""}, {"min-bytes", true, ""}, {"max-bytes", true, ""}, {"iters", true, ""},
        {"rounds", true, ""}}},
      {"step",
       {{"model", true, ""}, {"batch-size", true, ""}, {"steps", true, ""}, {"bucket-mb", true, ""},
        {"device", true, ""}, {"precision", true, ""}, {"tf32", true, ""}, {"layers", true, ""},
        {"heads", true, ""}, {"embd", true, ""}, {"block-size", true, ""}, {"vocab", true, ""},
        {"zero-stage", true, ""}, {"optimizer", true, ""}, {"update", false, ""}, {"cuda-graphs", false, ""},
        {"profile", true, ""}}}};
  const std::string what = args.empty() ? "" : args.front();
  if (wants_help(args)) {
    if (what == "data" || what.rfind('-', 0) == 0) std::cout << bench_data_usage() << "\n";
    if (what == "comm" || what.rfind('-', 0) == 0) std::cout << bench_comm_usage() << "\n";
    if (what == "step" || what.rfind('-', 0) == 0) std::cout << bench_step_usage();
    return 0;
  }
  const auto known = flags.find(what);
  if (known == flags.end()) throw ConfigError("bench: expected 'data', 'comm' or 'step' (see hpctrain bench --help)");
  const config::ParsedArgs parsed = config::parse_args(args, known->second, /*with_options=*/false, false);
  if (parsed.positionals.size() != 1) {
    throw ConfigError("bench " + what + ": unexpected argument '" + parsed.positionals.back() +
                      "' (see hpctrain bench " + what + " --help)");
  }
  tune_allocators();  // measure with the allocator settings training runs with
  if (what == "data") return bench_data(parsed);
  if (what == "comm") return bench_comm(parsed);
  return bench_step(parsed);
}

}  // namespace hpctrain::cli
