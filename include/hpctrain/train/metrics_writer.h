// metrics.jsonl: one JSON object per line, appended and flushed as training goes, so a crash loses
// at most the line being written and a plot can follow a live run. Written by rank 0 only.
// Depends on core and nlohmann-json.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace hpctrain::train {

class MetricsWriter {
 public:
  // `enabled` false (ranks other than 0) makes every call a no-op.
  MetricsWriter(const std::string& path, bool enabled);
  void write(const nlohmann::json& record);

 private:
  std::ofstream out_;
  bool enabled_;
};

}  // namespace hpctrain::train
