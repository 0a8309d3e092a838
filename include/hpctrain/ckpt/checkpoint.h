// The checkpoint file: HDF5 with the model's named tensors under /model/<name> and metadata
// attributes on the root (docs/checkpoint-format.md). Writes are atomic: a temporary file is
// flushed, fsynced and renamed into place, then `latest` is updated the same way.
// Depends on core, io and ATen; callers pass named tensors, so this never sees a torch module.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hpctrain::ckpt {

inline constexpr std::int64_t kFormatVersion = 1;

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct CheckpointMeta {
  std::int64_t format_version = kFormatVersion;
  std::string hpctrain_version;
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t world_size = 1;
  std::string model_name;
  std::string config_text;  // the resolved config (INI)
  std::string created;      // UTC, ISO 8601
};

// Writes `<dir>/ckpt-<step>.h5` and points `<dir>/latest` at it; returns the file's path.
// Throws CheckpointError.
std::string write_checkpoint(const std::string& dir, const NamedTensors& model,
                             const CheckpointMeta& meta);

// Reads the metadata and copies every tensor of /model into `model` (matched by name), checking
// that names, shapes and dtypes agree and saying exactly what does not. Throws CheckpointError.
CheckpointMeta read_checkpoint(const std::string& path, const NamedTensors& model);

// The file `<dir>/latest` points at, or "" when there is none.
std::string latest_checkpoint(const std::string& dir);

}  // namespace hpctrain::ckpt
