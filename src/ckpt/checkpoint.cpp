#include "hpctrain/ckpt/checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "hpctrain/io/h5_file.h"

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

}  // namespace

std::string write_checkpoint(const std::string& dir, const NamedTensors& model,
                             const CheckpointMeta& meta) {
  const std::string name = "ckpt-" + std::to_string(meta.step) + ".h5";
  const fs::path target = fs::path(dir) / name;
  const fs::path temp = fs::path(dir) / (name + ".tmp-" + std::to_string(getpid()));
  try {
    fs::create_directories(dir);
    io::H5File file = io::H5File::create(temp.string(), kCode);
    file.set_attr("format", std::string("hpctrain-checkpoint"));
    file.set_attr("format_version", meta.format_version);
    file.set_attr("hpctrain_version", meta.hpctrain_version);
    file.set_attr("step", meta.step);
    file.set_attr("epoch", meta.epoch);
    file.set_attr("world_size", meta.world_size);
    file.set_attr("model_name", meta.model_name);
    file.set_attr("config", meta.config_text);
    file.set_attr("created", meta.created);
    io::WriteOptions options;
    for (const auto& [tensor_name, tensor] : model) {
      const at::Tensor host = tensor.detach().to(at::kCPU).contiguous();
      options.chunk_rows = host.dim() == 0 ? 0 : std::max<std::int64_t>(1, host.size(0));
      const auto sizes = host.sizes();
      file.write("model/" + tensor_name, io_dtype(host.scalar_type(), tensor_name),
                 std::vector<std::int64_t>(sizes.begin(), sizes.end()), host.data_ptr(), options);
    }
    file.close();
    sys::publish_atomically(temp.string(), target.string());

    const fs::path latest_temp = fs::path(dir) / ("latest.tmp-" + std::to_string(getpid()));
    std::ofstream(latest_temp) << name << "\n";
    sys::publish_atomically(latest_temp.string(), (fs::path(dir) / "latest").string());
  } catch (const Error& e) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw CheckpointError(std::string("writing checkpoint ") + target.string() + ": " + e.what());
  } catch (const fs::filesystem_error& e) {
    throw CheckpointError(std::string("writing checkpoint ") + target.string() + ": " + e.what());
  }
  return target.string();
}

CheckpointMeta read_checkpoint(const std::string& path, const NamedTensors& model) {
  const io::H5File file = io::H5File::open_read(path, kCode);
  CheckpointMeta meta;
  if (!file.has_attr("format") || file.attr_string("format") != "hpctrain-checkpoint") {
    throw CheckpointError(path + ": not an hpctrain checkpoint (no format attribute)");
  }
  meta.format_version = file.attr_int("format_version");
  if (meta.format_version > kFormatVersion) {
    throw CheckpointError(path + ": format version " + std::to_string(meta.format_version) +
                          " is newer than this hpctrain reads (" + std::to_string(kFormatVersion) +
                          "); upgrade hpctrain");
  }
  meta.hpctrain_version = file.attr_string("hpctrain_version");
  meta.step = file.attr_int("step");
  meta.epoch = file.attr_int("epoch");
  meta.world_size = file.attr_int("world_size");
  meta.model_name = file.attr_string("model_name");
  meta.config_text = file.attr_string("config");
  meta.created = file.attr_string("created");

  // Compare the two name sets first, so the error lists every difference at once.
  const std::vector<std::string> stored = file.list_datasets("model");
  std::map<std::string, bool> expected;
  for (const auto& [name, tensor] : model) expected[name] = false;
  std::string missing;
  std::string unexpected;
  for (const auto& name : stored) {
    if (expected.count(name) == 0) {
      unexpected += (unexpected.empty() ? "" : ", ") + name;
    } else {
      expected[name] = true;
    }
  }
  for (const auto& [name, found] : expected) {
    if (!found) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (!missing.empty() || !unexpected.empty()) {
    throw CheckpointError(path + " (model " + meta.model_name + ") does not match this model:" +
                          (missing.empty() ? "" : " missing " + missing + ";") +
                          (unexpected.empty() ? "" : " unexpected " + unexpected + ";") +
                          " check model.name and the model options");
  }
  c10::NoGradGuard no_grad;
  for (const auto& [name, tensor] : model) {
    const io::DatasetInfo info = file.info("model/" + name);
    const auto sizes = tensor.sizes();
    const std::vector<std::int64_t> shape(sizes.begin(), sizes.end());
    const io::DType dtype = io_dtype(tensor.scalar_type(), name);
    if (info.shape != shape || info.dtype != dtype) {
      throw CheckpointError(path + ": " + name + " is " + io::dtype_name(info.dtype) +
                            io::shape_text(info.shape) + " in the checkpoint but " +
                            io::dtype_name(dtype) + io::shape_text(shape) + " in the model");
    }
    at::Tensor host = at::empty(shape, tensor.options().device(at::kCPU));
    file.read("model/" + name, dtype, host.data_ptr());
    tensor.detach().copy_(host);
  }
  return meta;
}

std::string latest_checkpoint(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "latest");
  std::string name;
  if (!(in >> name)) return "";
  return (fs::path(dir) / name).string();
}

}  // namespace hpctrain::ckpt
