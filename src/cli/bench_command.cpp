// `hpctrain bench <what>`: dispatch to one measurement (bench_data.cpp, bench_comm.cpp,
// bench_step.cpp).
#include <iostream>

#include "bench.h"
#include "hpctrain/cli/commands.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "runtime.h"

namespace hpctrain::cli {

int run_bench(const Args& args) {
  const std::vector<config::Flag> flags{
      {"data", true, ""},      {"split", true, ""},     {"batch-size", true, ""},
      {"repeats", true, ""},   {"cache-mb", true, ""},  {"backend", true, ""},
      {"min-bytes", true, ""}, {"max-bytes", true, ""}, {"iters", true, ""}, {"rounds", true, ""},
      {"model", true, ""},     {"steps", true, ""},     {"bucket-mb", true, ""},
      {"device", true, ""},    {"io", false, ""},       {"shuffle-window-mb", true, ""},
      {"cold", false, ""},     {"prefetch", true, ""},  {"precision", true, ""},
      {"tf32", true, ""},      {"layers", true, ""},    {"heads", true, ""},
      {"embd", true, ""},      {"block-size", true, ""}, {"vocab", true, ""}};
  const std::string what = args.empty() ? "" : args.front();
  if (wants_help(args)) {
    if (what == "data" || what.rfind('-', 0) == 0) std::cout << bench_data_usage() << "\n";
    if (what == "comm" || what.rfind('-', 0) == 0) std::cout << bench_comm_usage() << "\n";
    if (what == "step" || what.rfind('-', 0) == 0) std::cout << bench_step_usage();
    return 0;
  }
  const config::ParsedArgs parsed = config::parse_args(args, flags, /*with_options=*/false, false);
  sys::tune_allocator();  // measure with the allocator settings training runs with
  if (parsed.positionals.size() == 1 && what == "data") return bench_data(parsed);
  if (parsed.positionals.size() == 1 && what == "comm") return bench_comm(parsed);
  if (parsed.positionals.size() == 1 && what == "step") return bench_step(parsed);
  throw ConfigError("bench: expected 'data', 'comm' or 'step' (see hpctrain bench --help)");
}

}  // namespace hpctrain::cli
