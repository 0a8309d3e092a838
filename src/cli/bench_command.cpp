// `hpctrain bench <what>`: the table of modes, as nccl-tests has one entry per operation over one
// driver (bench_driver.h). An entry names its measurement, the flag that selects it, every flag
// it reads (one it does not use is refused in one line, rather than ignored) and the function
// that runs it (bench_data.cpp, bench_comm.cpp, bench_step.cpp, bench_update_step.cpp,
// bench_sharded_step.cpp).
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "bench.h"
#include "hpctrain/core/error.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/launch/commands.h"

namespace hpctrain::cli {
namespace {

// One mode: the measurement, the flag that selects it ("" for the measurement's plain mode),
// every flag it reads (its selector included) and what runs it.
struct BenchMode {
  std::string what;
  std::string selector;
  std::vector<std::string> flags;
  int (*run)(const config::ParsedArgs& parsed);
};

const std::vector<std::string> kModelFlags{"model", "batch-size", "steps", "bucket-mb", "device", "precision",
                                           "layers", "heads", "embd", "block-size", "vocab", "hf-config",
                                           "check-collectives"};

std::vector<std::string> with(std::vector<std::string> flags, const std::vector<std::string>& more) {
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

const std::vector<BenchMode>& bench_modes() {
  static const std::vector<BenchMode> modes{
      {"data", "",
       {"data", "split", "batch-size", "repeats", "prefetch", "cache-mb", "shuffle-window-mb", "cold", "data-io"},
       bench_data},
      {"data", "io", {"data", "io", "split", "repeats", "cache-mb", "cold"}, bench_data_io},
      {"comm", "", {"backend", "min-bytes", "max-bytes", "iters", "rounds", "check-collectives"}, bench_comm},
      {"step", "", with(kModelFlags, {"tf32"}),
       [](const config::ParsedArgs& p) { return bench_step(p, bench_step_parts); }},
      {"step", "zero-stage", with(kModelFlags, {"zero-stage", "optimizer"}),
       [](const config::ParsedArgs& p) { return bench_step(p, bench_sharded_step); }},
      {"step", "update", with(kModelFlags, {"tf32", "update", "cuda-graphs", "profile"}),
       [](const config::ParsedArgs& p) { return bench_step(p, bench_update_step); }},
  };
  return modes;
}

std::string mode_name(const BenchMode& mode) {
  return "bench " + mode.what + (mode.selector.empty() ? "" : " --" + mode.selector);
}

// Every flag of `what`'s modes, for the parser: valueless ones are the selectors and --cold.
std::vector<config::Flag> parser_flags(const std::string& what) {
  std::vector<config::Flag> out;
  for (const BenchMode& mode : bench_modes()) {
    if (mode.what != what) continue;
    for (const std::string& name : mode.flags) {
      const bool valueless = name == "io" || name == "cold" || name == "update" || name == "cuda-graphs";
      const auto same = [&](const config::Flag& f) { return f.name == name; };
      if (std::none_of(out.begin(), out.end(), same)) out.push_back({name, !valueless, ""});
    }
  }
  return out;
}

// The mode the given flags select; a flag it does not read is refused.
const BenchMode& chosen_mode(const std::string& what, const config::ParsedArgs& parsed) {
  const BenchMode* chosen = nullptr;
  for (const BenchMode& mode : bench_modes()) {
    if (mode.what != what || (!mode.selector.empty() && !parsed.has(mode.selector))) continue;
    if (chosen != nullptr && !chosen->selector.empty()) {
      throw ConfigError(mode_name(*chosen) + " and --" + mode.selector + " are two measurements; give one");
    }
    chosen = &mode;
  }
  HT_CHECK(chosen != nullptr, "no plain mode of bench " + what);
  for (const auto& [flag, value] : parsed.flags) {
    if (std::find(chosen->flags.begin(), chosen->flags.end(), flag) != chosen->flags.end()) continue;
    std::string reads;
    for (const std::string& name : chosen->flags) reads += (reads.empty() ? "--" : ", --") + name;
    throw ConfigError(mode_name(*chosen) + " does not use --" + flag + " (it reads " + reads +
                      "; see hpctrain bench " + what + " --help)");
  }
  return *chosen;
}

}  // namespace

int run_bench(const Args& args) {
  const std::string what = args.empty() ? "" : args.front();
  if (wants_help(args)) {
    if (what == "data" || what.rfind('-', 0) == 0) std::cout << bench_data_usage() << "\n";
    if (what == "comm" || what.rfind('-', 0) == 0) std::cout << bench_comm_usage() << "\n";
    if (what == "step" || what.rfind('-', 0) == 0) std::cout << bench_step_usage();
    return 0;
  }
  if (what != "data" && what != "comm" && what != "step") {
    throw ConfigError("bench: expected 'data', 'comm' or 'step' (see hpctrain bench --help)");
  }
  const config::ParsedArgs parsed = config::parse_args(args, parser_flags(what), /*with_options=*/false, false);
  if (parsed.positionals.size() != 1) {
    throw ConfigError("bench " + what + ": unexpected argument '" + parsed.positionals.back() +
                      "' (see hpctrain bench " + what + " --help)");
  }
  const BenchMode& mode = chosen_mode(what, parsed);
  tune_allocators();  // measure with the allocator settings training runs with
  return mode.run(parsed);
}

}  // namespace hpctrain::cli
