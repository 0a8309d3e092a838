#include "hpctrain/ckpt/checkpoint.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <c10/core/GradMode.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"

namespace hpctrain::ckpt {
namespace fs = std::filesystem;
namespace {

constexpr ExitCode kCode = ExitCode::kCheckpoint;

io::DType io_dtype(at::ScalarType type, const std::string& name) {
  switch (type) {
    case at::kFloat: return io::DType::kFloat32;
    case at::kDouble: return io::DType::kFloat64;
    case at::kLong: return io::DType::kInt64;
    case at::kInt: return io::DType::kInt32;
    case at::kByte: return io::DType::kUInt8;
    default:
      throw CheckpointError("tensor '" + name + "' has dtype " + c10::toString(type) +
                            ", which checkpoints cannot store yet");
  }
}

at::ScalarType scalar_type(io::DType dtype) {
  switch (dtype) {
    case io::DType::kFloat32: return at::kFloat;
    case io::DType::kFloat64: return at::kDouble;
    case io::DType::kInt64: return at::kLong;
    case io::DType::kInt32: return at::kInt;
    case io::DType::kUInt8: return at::kByte;
    case io::DType::kUInt16: return at::kInt;
    case io::DType::kUInt32: return at::kLong;
  }
  return at::kByte;
}

std::vector<std::int64_t> shape_of(const at::Tensor& tensor) {
  const auto sizes = tensor.sizes();
  return {sizes.begin(), sizes.end()};
}

// Note [Writeback as we go]: the page cache takes a checkpoint's bytes far faster than the disk,
// so a write that left them all to the final fsync would take the time of both, one after the
// other. Every 16 MiB written, the disk is asked to start on what is there (sys::start_writeback),
// so it works while the rest is written and the fsync waits for the last part alone.
class WritebackPacer {
 public:
  explicit WritebackPacer(std::string path) : path_(std::move(path)) {}
  void wrote(std::int64_t bytes) {
    pending_ += bytes;
    if (pending_ < kEvery) return;
    sys::start_writeback(path_);
    pending_ = 0;
  }
  void finish() { sys::start_writeback(path_); }

 private:
  static constexpr std::int64_t kEvery = std::int64_t{16} << 20;
  std::string path_;
  std::int64_t pending_ = 0;
};

void write_group(io::H5File& file, const std::string& group, const NamedTensors& tensors, WritebackPacer& pacer) {
  io::WriteOptions options;
  for (const auto& [name, tensor] : tensors) {
    const at::Tensor host = tensor.detach().to(at::kCPU).contiguous();
    // Chunked by the first dimension, so fletcher32 covers the data; scalars are contiguous.
    options.chunk_rows = host.dim() == 0 || host.numel() == 0 ? 0 : std::max<std::int64_t>(1, host.size(0));
    file.write(group + "/" + name, io_dtype(host.scalar_type(), name), shape_of(host), host.data_ptr(), options);
    pacer.wrote(static_cast<std::int64_t>(host.nbytes()));
  }
}

// A sharded tensor's dataset is chunked by about 1 MiB of rows, so the ranks that write parts of it
// in turn mostly write chunks of their own, each rewriting only the chunks it shares with a
// neighbour; replicated tensors are one chunk each (write_group).
constexpr std::int64_t kSliceChunkBytes = std::int64_t{1} << 20;

void write_slices(io::H5File& file, const std::string& group, const TensorSlices& slices, WritebackPacer& pacer) {
  for (const TensorSlice& slice : slices) {
    const at::Tensor host = slice.data.detach().to(at::kCPU).contiguous();
    const io::DType dtype = io_dtype(host.scalar_type(), slice.name);
    const std::string path = group + "/" + slice.name;
    if (!file.exists(path)) {
      io::WriteOptions options;
      if (!slice.shape.empty() && slice.shape[0] > 0) {
        std::int64_t row = static_cast<std::int64_t>(io::dtype_size(dtype));
        for (size_t d = 1; d < slice.shape.size(); ++d) row *= std::max<std::int64_t>(1, slice.shape[d]);
        options.chunk_rows = std::clamp<std::int64_t>(kSliceChunkBytes / row, 1, slice.shape[0]);
      }
      file.create(path, dtype, slice.shape, options);
    }
    file.write_range(path, dtype, slice.offset, host.numel(), host.data_ptr());
    pacer.wrote(static_cast<std::int64_t>(host.nbytes()));
  }
}

// `<dir>/<pointer>` holds `name`, replaced atomically.
void point_at(const std::string& dir, const std::string& pointer, const std::string& name) {
  const fs::path temp = fs::path(dir) / (pointer + ".tmp-" + std::to_string(getpid()));
  std::ofstream(temp) << name << "\n";
  sys::publish_atomically(temp.string(), (fs::path(dir) / pointer).string());
}

std::string read_pointer(const std::string& dir, const std::string& pointer) {
  std::ifstream in(fs::path(dir) / pointer);
  std::string name;
  if (!(in >> name)) return "";
  return (fs::path(dir) / name).string();
}

// HDF5 failures come from io as Error with the checkpoint exit code; callers of this module get
// them as CheckpointError.
template <typename F>
auto as_checkpoint_error(F&& body) {
  try {
    return body();
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {
    throw CheckpointError(e.what());
  }
}

// The bytes of tensor data a checkpoint holds (what its file needs, metadata aside).
std::int64_t data_bytes(const Checkpoint& checkpoint) {
  std::int64_t bytes = 0;
  for (const auto& [group, tensors] : checkpoint.groups) {
    for (const auto& [name, tensor] : tensors) bytes += static_cast<std::int64_t>(tensor.nbytes());
  }
  for (const auto& [group, slices] : checkpoint.slices) {
    for (const TensorSlice& slice : slices) bytes += static_cast<std::int64_t>(slice.data.nbytes());
  }
  return bytes;
}

// Note [Out of space]: a write that fails on a full file system reaches us from HDF5 as its own
// words ("can't write unprocessed chunk data"), which say nothing a user can act on. Once the
// temporary file is gone, if the system said ENOSPC or the file system cannot hold what was to be
// written, the error says so, with both sizes and what to do; the checkpoints before are kept.
std::string write_failure(const fs::path& target, const std::string& what, std::int64_t needed) {
  std::error_code ec;
  const fs::space_info space = fs::space(target.parent_path(), ec);
  const bool full = what.find("No space left on device") != std::string::npos ||
                    (!ec && static_cast<std::int64_t>(space.available) < needed);
  if (!full) return "writing checkpoint " + target.string() + ": " + what;
  constexpr double kMB = 1e6;
  return fmt::format("writing checkpoint {}: no space left on device: {:.1f} MB free on the file system of {}, "
                     "the checkpoint needs about {:.1f} MB; free space there, lower ckpt.keep_last, or set run.dir "
                     "on a larger file system (the checkpoints written before are kept)",
                     target.string(), ec ? 0.0 : static_cast<double>(space.available) / kMB,
                     target.parent_path().string(), static_cast<double>(needed) / kMB);
}

}  // namespace

at::Tensor HostStaging::staged(const std::string& key, const at::Tensor& tensor) {
  if (!tensor.is_cuda()) {  // a fresh copy, freed after its write, as the host's memory is what is short
    return tensor.detach().to(tensor.options().device(at::kCPU), /*non_blocking=*/false, /*copy=*/true,
                              at::MemoryFormat::Contiguous);
  }
  at::Tensor& buffer = buffers_[key];
  if (!buffer.defined() || buffer.sizes() != tensor.sizes() || buffer.scalar_type() != tensor.scalar_type()) {
    buffer = at::empty(tensor.sizes(), tensor.options().device(at::kCPU).pinned_memory(true));
  }
  buffer.copy_(tensor.detach(), /*non_blocking=*/true);
  return buffer;
}

Checkpoint HostStaging::copy(const Checkpoint& checkpoint) {
  std::set<c10::DeviceIndex> gpus;  // whose copies were queued, not waited for
  const auto note = [&](const at::Tensor& tensor) {
    if (tensor.is_cuda()) gpus.insert(tensor.device().index());
  };
  Checkpoint copy{checkpoint.meta, {}, checkpoint.slices};
  for (const auto& [group, tensors] : checkpoint.groups) {
    NamedTensors& to = copy.groups[group];
    for (const auto& [name, tensor] : tensors) {
      note(tensor);
      to.emplace_back(name, staged(group + "/" + name, tensor));
    }
  }
  for (auto& [group, slices] : copy.slices) {
    for (size_t i = 0; i < slices.size(); ++i) {
      note(slices[i].data);
      slices[i].data = staged(group + "#" + std::to_string(i), slices[i].data);
    }
  }
  for (const c10::DeviceIndex gpu : gpus) torch::cuda::synchronize(gpu);
  return copy;
}

std::string checkpoint_path(const std::string& dir, std::int64_t step) {
  return (fs::path(dir) / ("ckpt-" + std::to_string(step) + ".h5")).string();
}

std::string write_checkpoint(const std::string& dir, const Checkpoint& checkpoint) {
  return publish_checkpoint(dir, start_checkpoint(dir, checkpoint), checkpoint.meta.step);
}

std::string start_checkpoint(const std::string& dir, const Checkpoint& checkpoint) {
  const CheckpointMeta& meta = checkpoint.meta;
  const fs::path target = checkpoint_path(dir, meta.step);
  const fs::path temp = fs::path(dir) / (target.filename().string() + ".tmp-" + std::to_string(getpid()));
  try {
    fs::create_directories(dir);
    io::H5File file = io::H5File::create(temp.string(), kCode);
    file.set_attr("format", std::string("hpctrain-checkpoint"));
    file.set_attr("format_version", meta.format_version);
    file.set_attr("hpctrain_version", meta.hpctrain_version);
    file.set_attr("step", meta.step);
    file.set_attr("epoch", meta.epoch);
    file.set_attr("cursor", meta.cursor);
    file.set_attr("world_size", meta.world_size);
    file.set_attr("model_name", meta.model_name);
    file.set_attr("config", meta.config_text);
    file.set_attr("created", meta.created);
    WritebackPacer pacer(temp.string());
    for (const auto& [group, tensors] : checkpoint.groups) write_group(file, group, tensors, pacer);
    for (const auto& [group, slices] : checkpoint.slices) write_slices(file, group, slices, pacer);
    file.close();
    pacer.finish();  // while the other ranks add their slices
  } catch (const Error& e) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw CheckpointError(write_failure(target, e.what(), data_bytes(checkpoint)));
  } catch (const fs::filesystem_error& e) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw CheckpointError(write_failure(target, e.what(), data_bytes(checkpoint)));
  }
  return temp.string();
}

void add_slices(const std::string& temp_path, const std::map<std::string, TensorSlices>& slices) {
  try {
    io::H5File file = io::H5File::open_write(temp_path, kCode);
    WritebackPacer pacer(temp_path);
    for (const auto& [group, part] : slices) write_slices(file, group, part, pacer);
    file.close();
    pacer.finish();
  } catch (const Error& e) {
    Checkpoint part;
    part.slices = slices;
    throw CheckpointError("this rank's part: " + write_failure(temp_path, e.what(), data_bytes(part)));
  }
}

std::string publish_checkpoint(const std::string& dir, const std::string& temp_path, std::int64_t step) {
  const fs::path target = checkpoint_path(dir, step);
  try {
    sys::publish_atomically(temp_path, target.string());
    point_at(dir, "latest", target.filename().string());
  } catch (const Error& e) {
    discard_checkpoint(temp_path);
    throw CheckpointError(std::string("writing checkpoint ") + target.string() + ": " + e.what());
  } catch (const fs::filesystem_error& e) {
    discard_checkpoint(temp_path);
    throw CheckpointError(std::string("writing checkpoint ") + target.string() + ": " + e.what());
  }
  return target.string();
}

void discard_checkpoint(const std::string& temp_path) {
  std::error_code ignored;
  fs::remove(temp_path, ignored);
}

CheckpointReader::CheckpointReader(const std::string& path)
    : path_(path), file_(as_checkpoint_error([&] {
        if (!fs::is_regular_file(path)) throw CheckpointError(path + ": no such checkpoint file");
        return io::H5File::open_read(path, kCode);
      })) {
  as_checkpoint_error([&] { read_meta(); });
}

void CheckpointReader::read_meta() {
  if (!file_.has_attr("format") || file_.attr_string("format") != "hpctrain-checkpoint") {
    throw CheckpointError(path_ + ": not an hpctrain checkpoint (no format attribute)");
  }
  meta_.format_version = file_.attr_int("format_version");
  if (meta_.format_version > kFormatVersion) {
    throw CheckpointError(path_ + ": format version " + std::to_string(meta_.format_version) +
                          " is newer than this hpctrain reads (" + std::to_string(kFormatVersion) +
                          "); upgrade hpctrain");
  }
  meta_.hpctrain_version = file_.attr_string("hpctrain_version");
  meta_.step = file_.attr_int("step");
  meta_.epoch = file_.attr_int("epoch");
  meta_.cursor = file_.has_attr("cursor") ? file_.attr_int("cursor") : 0;  // version 1: none
  meta_.world_size = file_.attr_int("world_size");
  meta_.model_name = file_.attr_string("model_name");
  meta_.config_text = file_.attr_string("config");
  meta_.created = file_.attr_string("created");
}

bool CheckpointReader::has_group(const std::string& group) const { return file_.exists(group); }

bool CheckpointReader::has(const std::string& group, const std::string& name) const {
  return as_checkpoint_error([&] { return file_.exists(group + "/" + name); });
}

std::vector<std::int64_t> CheckpointReader::stored_shape(const std::string& group, const std::string& name) const {
  return as_checkpoint_error([&] { return file_.info(group + "/" + name).shape; });
}

void CheckpointReader::read_slice(const std::string& group, const std::string& name, std::int64_t offset,
                                  const at::Tensor& out) const {
  as_checkpoint_error([&] {
    const std::string path = group + "/" + name;
    const io::DatasetInfo info = file_.info(path);
    const io::DType dtype = io_dtype(out.scalar_type(), name);
    if (info.dtype != dtype) {
      throw CheckpointError(path_ + ": " + path + " is " + io::dtype_name(info.dtype) + " in the checkpoint but " +
                            io::dtype_name(dtype) + " here");
    }
    HT_CHECK(out.is_contiguous() && out.device().is_cpu(), "read_slice into a contiguous host tensor");
    file_.read_range(path, dtype, offset, out.numel(), out.data_ptr());
  });
}

void CheckpointReader::read_into(const std::string& group, const NamedTensors& targets) const {
  as_checkpoint_error([&] { read_into_unchecked(group, targets); });
}

void CheckpointReader::read_into_unchecked(const std::string& group, const NamedTensors& targets) const {
  // Compare the two name sets first, so the error lists every difference at once.
  const std::vector<std::string> stored = file_.list_datasets(group);
  const std::set<std::string> stored_set(stored.begin(), stored.end());
  std::set<std::string> expected;
  for (const auto& [name, tensor] : targets) expected.insert(name);
  std::string missing;
  std::string unexpected;
  for (const auto& name : stored) {
    if (expected.count(name) == 0) unexpected += (unexpected.empty() ? "" : ", ") + name;
  }
  for (const auto& name : expected) {
    if (stored_set.count(name) == 0) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (!missing.empty() || !unexpected.empty()) {
    throw CheckpointError(path_ + " (model " + meta_.model_name + ") does not match this " +
                          (group == "model" ? "model" : "run's " + group + " state") + ":" +
                          (missing.empty() ? "" : " missing " + missing + ";") +
                          (unexpected.empty() ? "" : " unexpected " + unexpected + ";") +
                          " check model.name and the model and optim options");
  }
  c10::NoGradGuard no_grad;
  for (const auto& [name, tensor] : targets) {
    const io::DatasetInfo info = file_.info(group + "/" + name);
    const std::vector<std::int64_t> shape = shape_of(tensor);
    const io::DType dtype = io_dtype(tensor.scalar_type(), name);
    if (info.shape != shape || info.dtype != dtype) {
      throw CheckpointError(path_ + ": " + group + "/" + name + " is " + io::dtype_name(info.dtype) +
                            io::shape_text(info.shape) + " in the checkpoint but " +
                            io::dtype_name(dtype) + io::shape_text(shape) + " here");
    }
    at::Tensor host = at::empty(shape, tensor.options().device(at::kCPU));
    file_.read(group + "/" + name, dtype, host.data_ptr());
    tensor.detach().copy_(host);
  }
}

NamedTensors CheckpointReader::read_group(const std::string& group) const {
  return as_checkpoint_error([&] { return read_group_unchecked(group); });
}

NamedTensors CheckpointReader::read_group_unchecked(const std::string& group) const {
  NamedTensors out;
  for (const auto& name : file_.list_datasets(group)) out.emplace_back(name, read_tensor_unchecked(group + "/" + name));
  return out;
}

at::Tensor CheckpointReader::read_tensor_unchecked(const std::string& path) const {
  const io::DatasetInfo info = file_.info(path);
  at::Tensor host;
  try {
    host = at::empty(info.shape, at::TensorOptions().dtype(scalar_type(info.dtype)));
  } catch (const c10::Error&) {
    throw CheckpointError(path_ + ": " + path + " declares the shape " + io::shape_text(info.shape) +
                          ", which cannot be allocated; the file is damaged");
  }
  const io::DType read_as = info.dtype == io::DType::kUInt16   ? io::DType::kInt32
                            : info.dtype == io::DType::kUInt32 ? io::DType::kInt64
                                                               : info.dtype;
  file_.read(path, read_as, host.data_ptr());
  return host;
}

at::Tensor CheckpointReader::read_tensor(const std::string& group, const std::string& name) const {
  return as_checkpoint_error([&] { return read_tensor_unchecked(group + "/" + name); });
}

std::vector<StoredTensor> CheckpointReader::list_group(const std::string& group) const {
  return as_checkpoint_error([&] {
    std::vector<StoredTensor> out;
    if (!file_.exists(group)) return out;
    for (const auto& name : file_.list_datasets(group)) {
      const io::DatasetInfo info = file_.info(group + "/" + name);
      out.push_back({name, info.shape, scalar_type(info.dtype)});
    }
    return out;
  });
}

std::int64_t CheckpointReader::verify() const {
  std::int64_t tensors = 0;
  for (const char* group : kGroups) {
    tensors += static_cast<std::int64_t>(read_group(group).size());
  }
  return tensors;
}

CheckpointMeta read_checkpoint(const std::string& path, const NamedTensors& model) {
  const CheckpointReader reader(path);
  reader.read_into(group::kModel, model);
  return reader.meta();
}

std::int64_t stored_count(const at::Tensor& value, const std::string& what) {
  if (value.numel() != 1 || value.is_floating_point() || value.is_complex() || value.scalar_type() == at::kBool ||
      value.item<std::int64_t>() < 0) {
    throw CheckpointError(what + " is not a single non-negative integer");
  }
  return value.item<std::int64_t>();
}

double stored_double(const at::Tensor& value, const std::string& what) {
  if (value.numel() != 1 || value.is_complex()) throw CheckpointError(what + " is not a single number");
  return value.item<double>();
}

std::string latest_checkpoint(const std::string& dir) { return read_pointer(dir, "latest"); }

void mark_best(const std::string& dir, const std::string& path) {
  try {
    point_at(dir, "best", fs::path(path).filename().string());
  } catch (const Error& e) {
    throw CheckpointError(std::string("marking the best checkpoint in ") + dir + ": " + e.what());
  }
}

std::string best_checkpoint(const std::string& dir) { return read_pointer(dir, "best"); }

std::vector<std::string> list_checkpoints(const std::string& dir) {
  static const std::regex pattern(R"(ckpt-(\d+)\.h5)");
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, match, pattern)) found.emplace_back(std::stoll(match[1].str()), entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

void prune_checkpoints(const std::string& dir, std::int64_t keep) {
  if (keep <= 0) return;
  const std::vector<std::string> all = list_checkpoints(dir);
  const std::string best = best_checkpoint(dir);
  for (size_t i = static_cast<size_t>(keep); i < all.size(); ++i) {
    if (all[i] == best) continue;
    std::error_code ignored;
    fs::remove(all[i], ignored);
  }
}

int remove_unfinished_writes(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().find(".tmp-") == std::string::npos) continue;
    std::error_code ignored;
    if (fs::remove(entry.path(), ignored)) ++removed;
  }
  return removed;
}

}  // namespace hpctrain::ckpt
