// `hpctrain trace merge`: the ranks' timelines (trace/rank-<r>.json, core/trace.h) joined into one
// Chrome trace-event file with a process per rank. Each file is checked to be a timeline as
// hpctrain writes it before its events are taken. Depends on core.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace hpctrain::observe {

struct TimelineFacts {
  int rank = 0;
  std::string host;
  std::int64_t first_step = 0;
  std::int64_t last_step = 0;
  std::int64_t spans = 0;
};

class TimelineMerger {
 public:
  TimelineMerger();
  ~TimelineMerger();
  TimelineMerger(const TimelineMerger&) = delete;
  TimelineMerger& operator=(const TimelineMerger&) = delete;

  // Takes one rank's file; `source` names it in errors. Throws ConfigError (exit 2) saying what is
  // wrong where: not JSON, not a timeline, a rank already taken.
  TimelineFacts add(const std::string& text, const std::string& source);
  // The merged file's text.
  std::string merged_text() const;
  const std::map<int, TimelineFacts>& ranks() const { return ranks_; }

 private:
  struct Events;
  std::unique_ptr<Events> events_;
  std::map<int, TimelineFacts> ranks_;
};

struct MergedTimelines {
  std::string path;
  std::map<int, TimelineFacts> ranks;
};
// Merges <run_dir>/trace/rank-*.json into <run_dir>/trace/all-ranks.json. Throws ConfigError when
// there is no timeline or a file is not one. The files are read whole, after their size is
// checked against `max_bytes`.
MergedTimelines merge_timelines(const std::string& run_dir, std::int64_t max_bytes = std::int64_t{1} << 30);

}  // namespace hpctrain::observe
