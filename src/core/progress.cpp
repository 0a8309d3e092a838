#include "hpctrain/core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace hpctrain {

ProgressBar::ProgressBar(std::string label, std::int64_t total)
    : label_(std::move(label)), total_(std::max<std::int64_t>(1, total)),
      enabled_(isatty(STDERR_FILENO) == 1) {}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fputc('\n', stderr);
}

std::string ProgressBar::render(const std::string& label, std::int64_t done, std::int64_t total) {
  constexpr int kWidth = 30;
  total = std::max<std::int64_t>(1, total);
  done = std::clamp<std::int64_t>(done, 0, total);
  const auto filled = static_cast<int>(kWidth * done / total);
  return label + " [" + std::string(static_cast<size_t>(filled), '=') +
         std::string(static_cast<size_t>(kWidth - filled), ' ') + "] " +
         std::to_string(100 * done / total) + "% " + std::to_string(done) + "/" + std::to_string(total);
}

void ProgressBar::update(std::int64_t done) {
  if (!enabled_) return;
  const bool finished = done >= total_;
  std::fprintf(stderr, "\r%s%s", render(label_, done, total_).c_str(), finished ? "\n" : "");
  std::fflush(stderr);
  drawn_ = !finished;
}

}  // namespace hpctrain
