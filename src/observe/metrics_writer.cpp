#include "hpctrain/observe/metrics_writer.h"

#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/tensorboard/tensorboard_writer.h"

namespace hpctrain::observe {

MetricsWriter::MetricsWriter(const std::string& path, bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  out_.open(path, std::ios::app);
  if (!out_) throw Error("cannot open " + path + " for writing");
}

void MetricsWriter::start_tensorboard(const std::string& dir, std::int64_t step, const std::string& config_text) {
  if (!enabled_) return;
#if HT_WITH_TENSORBOARD
  tensorboard_ = std::make_shared<tensorboard::TensorBoardWriter>(dir, step, config_text);
#else
  (void)step;
  (void)config_text;
  log::warn("log.tensorboard: this build has no protobuf, so nothing is written to {}; install protobuf and protoc "
            "(libprotobuf-dev protobuf-compiler) and rebuild, or set log.tensorboard=false",
            dir);
#endif
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!enabled_) return;
  out_ << record.dump() << "\n";
  out_.flush();
#if HT_WITH_TENSORBOARD
  if (tensorboard_) tensorboard_->write(record);
#endif
}

}  // namespace hpctrain::observe
