#include "hpctrain/observe/step_timing.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace hpctrain::observe {

StepBreakdown breakdown(const IntervalTimes& times, double wall_s) {
  StepBreakdown out;
  if (times.steps <= 0) return out;
  const double per_step = 1e3 / static_cast<double>(times.steps);
  out.step_ms = wall_s * per_step;
  out.data_ms = times.data_s * per_step;
  out.comm_ms = times.comm_s * per_step;
  out.compute_ms = std::max(0.0, out.step_ms - out.data_ms - out.comm_ms);
  return out;
}

std::string format_duration(double seconds) {
  const auto total = static_cast<std::int64_t>(std::llround(std::max(0.0, seconds)));
  const std::int64_t hours = total / 3600;
  const std::int64_t minutes = total % 3600 / 60;
  if (hours > 0) return fmt::format("{}h{:02d}m", hours, minutes);
  if (minutes > 0) return fmt::format("{}m{:02d}s", minutes, total % 60);
  return fmt::format("{}s", total);
}

}  // namespace hpctrain::observe
