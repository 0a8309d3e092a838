// `hpctrain trace merge RUN_DIR`: one timeline file of every rank (observe/timeline_merge.h).
// Single process; no MPI.
#include <iostream>

#include "hpctrain/core/error.h"
#include "hpctrain/launch/commands.h"
#include "hpctrain/observe/timeline_merge.h"

namespace hpctrain::cli {
namespace {

const char* kTraceUsage =
    "usage: hpctrain trace merge RUN_DIR\n\n"
    "Joins the timelines that log.trace_steps=A-B made every rank write (RUN_DIR/trace/rank-<r>.json)\n"
    "into RUN_DIR/trace/all-ranks.json, one process per rank, for https://ui.perfetto.dev or\n"
    "chrome://tracing. Times are each host's clock: ranks on hosts whose clocks differ are offset.\n";

}  // namespace

int run_trace(const Args& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kTraceUsage;
    return 0;
  }
  if (args.size() != 2 || args[0] != "merge") {
    throw ConfigError("trace: expected `hpctrain trace merge RUN_DIR` (hpctrain trace --help)");
  }
  const observe::MergedTimelines merged = observe::merge_timelines(args[1]);
  for (const auto& [rank, facts] : merged.ranks) {
    std::cout << "rank " << rank << " (" << facts.host << "): steps " << facts.first_step << "-" << facts.last_step
              << ", " << facts.spans << " spans\n";
  }
  std::cout << "wrote " << merged.path << " (" << merged.ranks.size() << " rank(s))\n";
  return 0;
}

}  // namespace hpctrain::cli
