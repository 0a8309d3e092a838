#include "hpctrain/weights/weight_writer.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <unistd.h>

#include <fstream>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "hpctrain/io/safetensors.h"

namespace hpctrain::weights {
namespace {

// The bytes of a torch.save file holding {name: tensor}. torch::pickle_save would tag the typed
// Dict with torch.jit._pickle.restore_type_tag, which torch.load's weights_only unpickler (the
// default since PyTorch 2.6) refuses; pickled untagged it is a plain dict that loads anywhere.
std::vector<char> torch_save_bytes(const ckpt::NamedTensors& tensors) {
  c10::Dict<std::string, at::Tensor> state;
  for (const auto& [name, tensor] : tensors) state.insert(name, tensor);
  std::vector<char> pickled;
  torch::jit::Pickler pickler([&](const char* data, size_t size) { pickled.insert(pickled.end(), data, data + size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(state);
  pickler.stop();
  std::vector<char> archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    archive.insert(archive.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return archive;
}

void write_pytorch(const std::string& path, const ckpt::NamedTensors& tensors) {
  const std::vector<char> bytes = torch_save_bytes(tensors);
  const std::string temp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream file(temp, std::ios::binary);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!file) throw Error("cannot write " + temp + " (check the path and free space)", ExitCode::kUsage);
  }
  sys::publish_atomically(temp, path);
}

io::StDtype safetensors_dtype(at::ScalarType type, const std::string& name) {
  switch (type) {
    case at::kDouble: return io::StDtype::kF64;
    case at::kFloat: return io::StDtype::kF32;
    case at::kHalf: return io::StDtype::kF16;
    case at::kBFloat16: return io::StDtype::kBF16;
    case at::kLong: return io::StDtype::kI64;
    case at::kInt: return io::StDtype::kI32;
    case at::kShort: return io::StDtype::kI16;
    case at::kChar: return io::StDtype::kI8;
    case at::kByte: return io::StDtype::kU8;
    case at::kBool: return io::StDtype::kBool;
    default:
      throw ConfigError("tensor " + name + " is " + c10::toString(type) + ", which safetensors does not hold");
  }
}

void write_safetensors(const std::string& path, const ckpt::NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> contiguous;  // keeps the bytes alive while they are written
  std::vector<io::StTensorOut> out;
  for (const auto& [name, tensor] : tensors) {
    contiguous.push_back(tensor.detach().cpu().contiguous());
    const at::Tensor& t = contiguous.back();
    out.push_back({name, safetensors_dtype(t.scalar_type(), name), t.sizes().vec(), t.data_ptr()});
  }
  io::write_safetensors(path, out, metadata);
}

}  // namespace

void write_weights(const std::string& path, const ckpt::NamedTensors& tensors, WeightFormat format,
                   std::map<std::string, std::string> metadata) {
  if (format == WeightFormat::kSafetensors) {
    metadata.emplace("format", "pt");
    write_safetensors(path, tensors, metadata);
  } else {
    HT_CHECK(format == WeightFormat::kPytorch, "write_weights writes safetensors or PyTorch files");
    write_pytorch(path, tensors);
  }
}

}  // namespace hpctrain::weights
