#include "hpctrain/tensorboard/tensorboard_writer.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/io/tfrecord.h"
#include "tensorboard/tfevents.pb.h"  // generated from src/tensorboard/tfevents.proto

namespace hpctrain::tensorboard {
namespace {

constexpr int kDtString = 7;  // tensorflow.DataType DT_STRING

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool is_event_file(const std::filesystem::path& path) {
  return path.filename().string().rfind("events.out.tfevents.", 0) == 0;
}

// Cuts `path` before its first event past `step`, or before a record it cannot read.
void cut_after(const std::filesystem::path& path, std::int64_t step) {
  const io::TfRecordFile file = io::read_tfrecords(path.string());
  std::uint64_t keep = file.valid_bytes;
  for (const io::TfRecord& record : file.records) {
    tfevents::Event event;
    if (!event.ParseFromString(record.data) || (event.has_summary() && event.step() > step)) {
      keep = record.offset;
      break;
    }
  }
  if (keep == std::filesystem::file_size(path)) return;
  std::filesystem::resize_file(path, keep);
  log::info("log.tensorboard: {} cut back to the events of steps <= {}, which this run continues", path.string(), step);
}

// The first event of a file: which format follows.
tfevents::Event file_version_event() {
  tfevents::Event event;
  event.set_wall_time(unix_time());
  event.set_file_version("brain.Event:2");
  return event;
}

// `text` under `tag` for TensorBoard's text plugin: a scalar string tensor.
tfevents::Event text_event(std::int64_t step, const std::string& tag, const std::string& text) {
  tfevents::Event event;
  event.set_wall_time(unix_time());
  event.set_step(step);
  tfevents::Summary::Value* value = event.mutable_summary()->add_value();
  value->set_tag(tag);
  value->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  value->mutable_tensor()->set_dtype(kDtString);
  value->mutable_tensor()->add_string_val(text);
  return event;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir, std::int64_t step, const std::string& config_text) {
  std::filesystem::create_directories(dir);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file() && is_event_file(entry.path())) cut_after(entry.path(), step);
  }
  const auto seconds = static_cast<std::int64_t>(unix_time());
  file_ = std::make_unique<io::TfRecordWriter>(dir + "/events.out.tfevents." + std::to_string(seconds) + "." +
                                               sys::host_name() + "." + std::to_string(::getpid()));
  file_->write(file_version_event().SerializeAsString());
  file_->write(text_event(step, "config", config_text).SerializeAsString());
}

TensorBoardWriter::~TensorBoardWriter() = default;

void TensorBoardWriter::write(const nlohmann::json& record) {
  if (!record.contains("step") || !record["step"].is_number_integer()) return;
  tfevents::Event event;
  event.set_wall_time(unix_time());
  event.set_step(record["step"].get<std::int64_t>());
  tfevents::Summary* summary = event.mutable_summary();
  for (const auto& [name, value] : record.items()) {
    if (name == "step" || name == "unix_time" || !value.is_number()) continue;
    // A tag once per step: an evaluation's record repeats the progress record's epoch.
    const auto [last, fresh] = last_step_.emplace(name, event.step());
    if (!fresh && last->second == event.step()) continue;
    last->second = event.step();
    tfevents::Summary::Value* scalar = summary->add_value();
    scalar->set_tag(name);
    scalar->set_simple_value(value.get<float>());
  }
  if (summary->value_size() > 0) file_->write(event.SerializeAsString());
}

const std::string& TensorBoardWriter::path() const { return file_->path(); }

}  // namespace hpctrain::tensorboard
