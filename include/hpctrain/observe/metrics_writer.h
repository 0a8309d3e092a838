// metrics.jsonl: one JSON object per line, appended and flushed as training goes, so a crash loses
// at most the line being written and a plot can follow a live run. Written by rank 0 only.
// With log.tensorboard, rank 0 also writes each record to TensorBoard's event file. Depends on
// core, io and nlohmann-json.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

namespace hpctrain::tensorboard {
class TensorBoardWriter;
}

namespace hpctrain::observe {

class MetricsWriter {
 public:
  // `enabled` false (ranks other than 0) makes every call a no-op.
  MetricsWriter(const std::string& path, bool enabled);
  // From here on each record also goes to a TensorBoard event file in `dir` (tensorboard/tensorboard_writer.h),
  // which starts at `step` with `config_text`.
  void start_tensorboard(const std::string& dir, std::int64_t step, const std::string& config_text);
  void write(const nlohmann::json& record);

 private:
  std::ofstream out_;
  bool enabled_;
  // Shared only so that a build without protobuf (no tensorboard_writer.cpp) needs no destructor.
  std::shared_ptr<tensorboard::TensorBoardWriter> tensorboard_;
};

}  // namespace hpctrain::observe
