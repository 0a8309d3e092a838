// A rank's timeline file as `hpctrain trace merge` reads it (observe/timeline_merge.h): parsed, every
// event checked, and, when accepted, the merged file must parse back as JSON with all its events.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "fuzz_target.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/trace.h"
#include "hpctrain/observe/timeline_merge.h"

namespace hpctrain::fuzz {

void write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  trace::start(dir + "/two-steps.json", 1, 1, 2);
  trace::name_thread("train");
  for (std::int64_t step = 1; step <= 3; ++step) {
    trace::begin_step(step);
    const trace::Span span("step", {{"step", step}});
    const trace::BucketScope bucket(0);
    trace::add_span("nccl (issue to wait)", "allreduce", trace::now_us(), trace::now_us() + 5,
                    {{"bucket", 0}, {"bytes", 4096}});
  }
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  static const bool quiet = (fuzz::silence_logs(), true);
  (void)quiet;
  try {
    observe::TimelineMerger merger;
    const observe::TimelineFacts facts =
        merger.add(std::string(reinterpret_cast<const char*>(data), size), "rank-0.json");
    const nlohmann::json merged = nlohmann::json::parse(merger.merged_text());
    std::int64_t spans = 0;
    for (const auto& event : merged["traceEvents"]) spans += event["ph"] == "X" ? 1 : 0;
    if (spans != facts.spans) throw std::logic_error("the merged file lost spans");
    fuzz::record(fuzz::Outcome::kAccepted);
  } catch (const Error& e) {
    if (e.code() != ExitCode::kUsage) throw;
    fuzz::record(fuzz::Outcome::kRefused);
  }
  return 0;
}
