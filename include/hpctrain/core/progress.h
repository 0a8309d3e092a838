// A one-line progress bar on stderr for long single-process jobs (imports). It draws only when
// stderr is a terminal, so logs and CI output stay clean. Depends on std only.
#pragma once

#include <cstdint>
#include <string>

namespace hpctrain {

class ProgressBar {
 public:
  ProgressBar(std::string label, std::int64_t total);
  ~ProgressBar();  // ends the line if the bar stopped short of total
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(std::int64_t done);  // reaching total ends the line

  // The text drawn for `done` of `total`, e.g. "train [=====     ] 50% 3/6"; exposed for tests.
  static std::string render(const std::string& label, std::int64_t done, std::int64_t total);

 private:
  std::string label_;
  std::int64_t total_;
  bool enabled_;
  bool drawn_ = false;
};

}  // namespace hpctrain
