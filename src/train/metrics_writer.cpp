#include "hpctrain/train/metrics_writer.h"

#include "hpctrain/core/error.h"

namespace hpctrain::train {

MetricsWriter::MetricsWriter(const std::string& path, bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  out_.open(path, std::ios::app);
  if (!out_) throw Error("cannot open " + path + " for writing");
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!enabled_) return;
  out_ << record.dump() << "\n";
  out_.flush();
}

}  // namespace hpctrain::train
