// The checkpoint file (docs/checkpoint-format.md): HDF5, metadata as root attributes, tensors in
// groups: /model/<name> (parameters and buffers), /optim/<parameter>/<state> (optimizer state),
// /sched/step, /rng/rank-<r>/{cpu,cuda} (every rank's generators), /metrics/<name> (best eval).
// Writes are atomic: a temporary file is flushed, fsynced and renamed into place, then `latest`
// is updated the same way; old checkpoints are pruned only after that.
// Depends on core, io and ATen; callers pass named tensors, so this never sees a torch module.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/io/h5_file.h"

namespace hpctrain::ckpt {

// 1: model only. 2: + optimizer, schedule, RNG, metrics and the sampler cursor.
inline constexpr std::int64_t kFormatVersion = 2;

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// The groups a checkpoint may hold (docs/checkpoint-format.md), named here once.
namespace group {
inline constexpr const char* kModel = "model";              // parameters and buffers (a LoRA base left out)
inline constexpr const char* kOptim = "optim";              // the optimizer's state per parameter
inline constexpr const char* kSched = "sched";              // the step and the skipped-step counts
inline constexpr const char* kRng = "rng";                  // every rank's generators
inline constexpr const char* kMetrics = "metrics";          // the best evaluations, after one
inline constexpr const char* kLossScaler = "loss_scaler";   // with train.precision=fp16
inline constexpr const char* kBase = "base";                // a LoRA base's checksums
inline constexpr const char* kEma = "ema";                  // with train.ema_decay
}  // namespace group

inline constexpr const char* kGroups[] = {group::kModel,   group::kOptim,      group::kSched, group::kRng,
                                          group::kMetrics, group::kLossScaler, group::kBase,  group::kEma};

struct CheckpointMeta {
  std::int64_t format_version = kFormatVersion;
  std::string hpctrain_version;
  std::int64_t step = 0;    // optimizer steps taken
  std::int64_t epoch = 0;   // the epoch in progress (0-based), or the epoch count when done
  std::int64_t cursor = 0;  // the sampler's global cursor within `epoch`
  std::int64_t world_size = 1;
  std::string model_name;
  std::string config_text;  // the resolved config (INI)
  std::string created;      // UTC, ISO 8601
};

// Part of a tensor whose elements several ranks hold (a sharded optimizer's state): stored as one
// dataset of the whole tensor's shape, to which each rank writes its elements, so the file reads
// like one written by a single rank.
struct TensorSlice {
  std::string name;                 // within its group, as a whole tensor would be named
  std::vector<std::int64_t> shape;  // the whole tensor's
  std::int64_t offset = 0;          // of data's first element, counted row-major over the whole
  at::Tensor data;                  // this rank's elements, 1-D (a 0-d tensor: offset 0, one element)
};
using TensorSlices = std::vector<TensorSlice>;

struct Checkpoint {
  CheckpointMeta meta;
  std::map<std::string, NamedTensors> groups;  // by name, of kGroups
  std::map<std::string, TensorSlices> slices;  // by group: this rank's parts of sharded tensors
};

// Copies of checkpoints in host memory, contiguous: what a background writer may write while
// training goes on changing the originals. A GPU's tensors are copied into pinned host tensors
// kept by name for the next copy, at the bus's speed and without faulting in a fresh gigabyte
// each time (the first copy pays for the memory); a copy of those is overwritten by the next, so
// its writer must be done before the next copy is made. Host tensors get fresh copies, freed
// with the write, since there the host's memory is what is short.
class HostStaging {
 public:
  Checkpoint copy(const Checkpoint& checkpoint);

 private:
  at::Tensor staged(const std::string& key, const at::Tensor& tensor);
  std::map<std::string, at::Tensor> buffers_;
};

// `<dir>/ckpt-<step>.h5`, where write_checkpoint puts it.
std::string checkpoint_path(const std::string& dir, std::int64_t step);

// Writes `<dir>/ckpt-<step>.h5` and points `<dir>/latest` at it; returns the file's path.
// Throws CheckpointError (the earlier checkpoints and `latest` are then untouched).
std::string write_checkpoint(const std::string& dir, const Checkpoint& checkpoint);

// A checkpoint written by several ranks (sharded state), in three parts: one rank starts it (a
// temporary file with everything but the other ranks' slices), each other rank in turn adds its
// slices, and the first publishes it (rename and `latest`, as write_checkpoint) or discards it.
// Every function throws CheckpointError; start_checkpoint then leaves no file behind.
std::string start_checkpoint(const std::string& dir, const Checkpoint& checkpoint);  // the temporary path
void add_slices(const std::string& temp_path, const std::map<std::string, TensorSlices>& slices);
std::string publish_checkpoint(const std::string& dir, const std::string& temp_path, std::int64_t step);
void discard_checkpoint(const std::string& temp_path);

// A stored tensor's description.
struct StoredTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  at::ScalarType dtype = at::kFloat;
};

// An open checkpoint. Every error is a CheckpointError naming the file.
class CheckpointReader {
 public:
  // Opens the file and reads its metadata; refuses a file that is not an hpctrain checkpoint or
  // has a newer format version.
  explicit CheckpointReader(const std::string& path);

  const std::string& path() const { return path_; }
  const CheckpointMeta& meta() const { return meta_; }
  bool has_group(const std::string& group) const;
  // Copies the group's tensors into `targets`, matched by name. Names, shapes and dtypes must
  // agree exactly; the error lists every missing and unexpected name at once.
  void read_into(const std::string& group, const NamedTensors& targets) const;
  // The group's tensors as stored, by name; empty when the group is absent.
  NamedTensors read_group(const std::string& group) const;
  // The group's tensors' names, shapes and dtypes as stored, read from the metadata alone (what
  // a reader that takes one tensor at a time plans with); empty when the group is absent.
  std::vector<StoredTensor> list_group(const std::string& group) const;
  // Tensor `group/name` as stored.
  at::Tensor read_tensor(const std::string& group, const std::string& name) const;
  // Whether `group/name` is stored.
  bool has(const std::string& group, const std::string& name) const;
  // Elements [offset, offset + out.numel()) of tensor `group/name`, counted row-major, into the
  // contiguous `out` (any shape; float32, float64 or int64, as stored). A range outside the
  // stored tensor, or another dtype, is a CheckpointError naming both.
  void read_slice(const std::string& group, const std::string& name, std::int64_t offset, const at::Tensor& out) const;
  // The stored shape of `group/name`.
  std::vector<std::int64_t> stored_shape(const std::string& group, const std::string& name) const;
  // Reads every tensor, so every chunk's fletcher32 checksum is verified. Returns the tensors read.
  std::int64_t verify() const;

 private:
  void read_meta();
  void read_into_unchecked(const std::string& group, const NamedTensors& targets) const;
  NamedTensors read_group_unchecked(const std::string& group) const;
  at::Tensor read_tensor_unchecked(const std::string& path) const;

  std::string path_;
  io::H5File file_;
  CheckpointMeta meta_;
};

// Reads the metadata and the /model group into `model`. Throws CheckpointError.
CheckpointMeta read_checkpoint(const std::string& path, const NamedTensors& model);

// The one value of a stored scalar entry (a counter, a loss scale, a best metric), for readers
// of state other than tensors. 0-d entries are stored without a checksum, so a damaged one may
// read as another value: a count must be a non-negative integer. Throws CheckpointError naming
// `what` when `value` holds more or fewer than one element, or (stored_count) a value that is not
// a non-negative integer.
std::int64_t stored_count(const at::Tensor& value, const std::string& what);
double stored_double(const at::Tensor& value, const std::string& what);

// The file `<dir>/latest` points at, or "" when there is none.
std::string latest_checkpoint(const std::string& dir);
// Points `<dir>/best` at `path` (atomically, like `latest`); best_checkpoint reads it ("" if none).
void mark_best(const std::string& dir, const std::string& path);
std::string best_checkpoint(const std::string& dir);
// Every `ckpt-<step>.h5` in `dir`, highest step first.
std::vector<std::string> list_checkpoints(const std::string& dir);
// Deletes all but the `keep` newest checkpoints of `dir` (keep 0: none deleted) and the one
// `best` names.
void prune_checkpoints(const std::string& dir, std::int64_t keep);
// Deletes the temporary files of writes that never finished (a killed writer); returns how many.
int remove_unfinished_writes(const std::string& dir);

}  // namespace hpctrain::ckpt
