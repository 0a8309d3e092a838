#include "hpctrain/weights/weight_file.h"

#include <ATen/ATen.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "hpctrain/core/error.h"
#include "hpctrain/io/safetensors.h"
#include "hpctrain/weights/hf_directory.h"
#include "hpctrain/weights/pytorch_file.h"

namespace hpctrain::weights {
namespace {

// The bytes of every format start differently: HDF5 and zip (torch.save) have signatures; a
// safetensors file's JSON header starts at byte 8 with '{'.
WeightFormat sniff(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw CheckpointError(path + ": cannot open the weights file (check model.init_from or the path given)");
  char head[9] = {};
  file.read(head, sizeof head);
  const auto got = file.gcount();
  if (got >= 8 && std::memcmp(head, "\x89HDF\r\n\x1a\n", 8) == 0) return WeightFormat::kCheckpoint;
  if (got >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) return WeightFormat::kPytorch;
  if (got == 9 && head[8] == '{') return WeightFormat::kSafetensors;
  if (got >= 2 && static_cast<unsigned char>(head[0]) == 0x80) {
    throw CheckpointError(path + ": a torch.save file in the legacy format (before PyTorch 1.6); load it in "
                                 "Python and save it again with torch.save, or as safetensors");
  }
  throw CheckpointError(path + ": not a weights file hpctrain reads (a .safetensors file, a torch.save "
                               "state_dict or an hpctrain checkpoint)");
}

at::ScalarType scalar_type(io::StDtype dtype) {
  switch (dtype) {
    case io::StDtype::kF64: return at::kDouble;
    case io::StDtype::kF32: return at::kFloat;
    case io::StDtype::kF16: return at::kHalf;
    case io::StDtype::kBF16: return at::kBFloat16;
    case io::StDtype::kI64: return at::kLong;
    case io::StDtype::kI32: return at::kInt;
    case io::StDtype::kI16: return at::kShort;
    case io::StDtype::kI8: return at::kChar;
    case io::StDtype::kU8: return at::kByte;
    case io::StDtype::kBool: return at::kBool;
  }
  return at::kFloat;
}

}  // namespace

const char* name_of(WeightFormat format) {
  switch (format) {
    case WeightFormat::kSafetensors: return "safetensors";
    case WeightFormat::kPytorch: return "PyTorch state_dict";
    case WeightFormat::kCheckpoint: return "hpctrain checkpoint";
    case WeightFormat::kHfDirectory: return "Hugging Face model directory";
  }
  return "?";
}

WeightFile WeightFile::open(const std::string& path) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "weights files are little-endian, read as they lie");
  WeightFile out;
  out.path_ = path;
  if (std::filesystem::is_directory(path)) {
    out.format_ = WeightFormat::kHfDirectory;
    HfWeights weights = open_hf_weights(path);
    out.tensors_ = std::move(weights.tensors);
    out.keep_alive_ = std::move(weights.keep_alive);
    return out;
  }
  out.format_ = sniff(path);
  if (out.format_ == WeightFormat::kCheckpoint) {
    out.tensors_ = ckpt::CheckpointReader(path).read_group(ckpt::group::kModel);
    if (out.tensors_.empty()) throw CheckpointError(path + ": the checkpoint holds no /model weights");
  } else if (out.format_ == WeightFormat::kPytorch) {
    out.tensors_ = read_pytorch_state_dict(path);
  } else {
    auto file = std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(path));
    for (const io::StTensorInfo& t : file->header().tensors) {
      // Read-only by contract: the mapping is PROT_READ, so a write would fault rather than corrupt.
      void* bytes = const_cast<std::uint8_t*>(file->bytes(t));
      out.tensors_.emplace_back(t.name, at::from_blob(bytes, t.shape, at::TensorOptions().dtype(scalar_type(t.dtype))));
    }
    out.keep_alive_ = file;
  }
  return out;
}

}  // namespace hpctrain::weights
