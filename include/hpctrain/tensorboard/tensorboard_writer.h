// TensorBoard's event file of a run (log.tensorboard): rank 0 writes
// <run.dir>/tensorboard/events.out.tfevents.<unix time>.<host>.<pid>, TFRecords (io/tfrecord.h) of
// TensorFlow's Event protobuf (src/tensorboard/tfevents.proto): a file_version event, the resolved
// config once as a text summary, then every number of every metrics.jsonl record as a scalar
// under its name at the record's step. Each event goes to the file at once, so a run stopped by
// a signal (exit 75) or killed loses nothing written before. Depends on core, io and
// nlohmann-json. The protobuf stays in the .cpp, and this module never sees libtorch's include
// directories: a pip or pytorch.org libtorch carries protobuf headers of another version there,
// which the code protoc generates does not compile against (docs/building.md).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace hpctrain::io {
class TfRecordWriter;
}

namespace hpctrain::tensorboard {

class TensorBoardWriter {
 public:
  // Cuts the event files already in `dir` back to the events of steps <= `step` (a resumed run
  // continues from its checkpoint's step, so no step is written twice), then opens a new file
  // and writes its file_version event and `config_text` (tag "config") at `step`.
  TensorBoardWriter(const std::string& dir, std::int64_t step, const std::string& config_text);
  ~TensorBoardWriter();

  // One event at record["step"] holding every number of `record` but step and unix_time (the
  // event's wall time), each tag at most once per step. A record without a step is left out.
  void write(const nlohmann::json& record);
  const std::string& path() const;

 private:
  std::unique_ptr<io::TfRecordWriter> file_;
  std::map<std::string, std::int64_t> last_step_;  // the step each tag was last written at
};

}  // namespace hpctrain::tensorboard
