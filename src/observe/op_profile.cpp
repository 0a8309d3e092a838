#include "hpctrain/observe/op_profile.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"

namespace hpctrain::observe {
namespace {

namespace profiler = torch::autograd::profiler;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The legacy profiler's events as pushes and pops, in their own clock's microseconds.
std::vector<std::vector<OpEvent>> op_events(const profiler::thread_event_lists& lists) {
  std::vector<std::vector<OpEvent>> threads;
  for (const auto& list : lists) {
    if (list.empty()) continue;
    const profiler::LegacyEvent& origin = list.front();
    std::vector<OpEvent>& events = threads.emplace_back();
    for (const profiler::LegacyEvent& event : list) {
      if (event.kind() == profiler::EventKind::PushRange) {
        events.push_back({true, event.name(), origin.cpuElapsedUs(event)});
      } else if (event.kind() == profiler::EventKind::PopRange) {
        events.push_back({false, "", origin.cpuElapsedUs(event)});
      }
    }
  }
  return threads;
}

void write_table(const std::string& path, const std::vector<OpTime>& times, std::int64_t steps, double wall_ms) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path);
  out << "# " << steps << " optimizer step(s), " << wall_ms << " ms of step work (wall); self and total CPU "
      << "ms of each operator over them, summed per name\nname\tcalls\tself_ms\ttotal_ms\n";
  for (const OpTime& t : times) out << t.name << "\t" << t.calls << "\t" << t.self_ms << "\t" << t.total_ms << "\n";
  if (!out) throw Error("log.profile_steps: cannot write " + path);
}

}  // namespace

std::vector<OpTime> sum_op_times(const std::vector<std::vector<OpEvent>>& threads) {
  struct Open {
    std::string name;
    double start_us;
    double children_us;
  };
  std::map<std::string, OpTime> by_name;
  for (const std::vector<OpEvent>& events : threads) {
    std::vector<Open> stack;
    for (const OpEvent& event : events) {
      if (event.push) {
        stack.push_back({event.name, event.us, 0});
        continue;
      }
      if (stack.empty()) continue;  // a pop of an operator entered before the profile began
      const Open open = stack.back();
      stack.pop_back();
      const double total_us = event.us - open.start_us;
      if (!stack.empty()) stack.back().children_us += total_us;
      OpTime& time = by_name[open.name];
      time.name = open.name;
      time.calls += 1;
      time.total_ms += total_us / 1e3;
      time.self_ms += (total_us - open.children_us) / 1e3;
    }
  }
  std::vector<OpTime> out;
  for (auto& [name, time] : by_name) out.push_back(time);
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.self_ms > b.self_ms; });
  return out;
}

OpProfile::OpProfile(config::StepRange range, std::string path) : range_(range), path_(std::move(path)) {}

OpProfile::~OpProfile() {
  if (on_) (void)profiler::disableProfilerLegacy();  // a run that ended inside the range
}

// Each step is profiled on its own, so the work between steps (the data, the progress line)
// stays out of the table.
void OpProfile::before_step(std::int64_t step) {
  if (range_.empty() || step < range_.first || step > range_.last) return;
  profiler::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU));
  on_ = true;
  started_ = now_ms();
}

void OpProfile::after_step(std::int64_t step) {
  if (!on_) return;
  on_ = false;
  std::vector<std::vector<OpEvent>> events = op_events(profiler::disableProfilerLegacy());
  wall_ms_ += now_ms() - started_;
  ++steps_;
  events_.insert(events_.end(), events.begin(), events.end());
  if (step < range_.last) return;
  write_table(path_, sum_op_times(events_), steps_, wall_ms_);
  events_.clear();
  log::info("log.profile_steps: the operators of steps {}-{} in {}", range_.first, range_.last, path_);
}

}  // namespace hpctrain::observe
