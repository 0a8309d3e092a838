#include "hpctrain/weights/hf_directory.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>
#include <vector>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "hpctrain/io/safetensors.h"

namespace hpctrain::weights {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const char* const kSingleFile = "model.safetensors";
const char* const kIndexFile = "model.safetensors.index.json";
constexpr std::int64_t kMaxIndexBytes = 64 << 20;  // a 405B model's index is about 100 KB

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  throw CheckpointError(where + ": " + what);
}

// A shard's name must stay inside the directory.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..";
}

at::ScalarType float_type(io::StDtype dtype, const std::string& where, const std::string& tensor) {
  switch (dtype) {
    case io::StDtype::kF32: return at::kFloat;
    case io::StDtype::kF16: return at::kHalf;
    case io::StDtype::kBF16: return at::kBFloat16;
    default: break;
  }
  refuse(where, "tensor '" + tensor + "' is " + io::name_of(dtype) +
                    "; a model directory's weights are read as F32, F16 or BF16");
}

struct Shards {
  std::vector<std::shared_ptr<io::SafetensorsFile>> files;
};

// The files to open, with the tensors each must hold (empty for the single file: whatever it has).
std::map<std::string, std::set<std::string>> planned_shards(const HfIndex& index) {
  std::map<std::string, std::set<std::string>> shards;
  for (const auto& [tensor, file] : index.weight_map) shards[file].insert(tensor);
  return shards;
}

}  // namespace

HfIndex parse_hf_index(const std::string& text, const std::string& where) {
  Json json;
  try {
    json = Json::parse(text);
  } catch (const Json::exception& e) {
    refuse(where, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!json.is_object() || !json.contains("weight_map") || !json["weight_map"].is_object()) {
    refuse(where, "no \"weight_map\" object (tensor name -> file); not a safetensors index");
  }
  HfIndex index;
  for (const auto& [tensor, file] : json["weight_map"].items()) {
    if (!file.is_string() || !plain_file_name(file.get<std::string>())) {
      refuse(where, "weight_map[\"" + tensor + "\"] is " + file.dump() + ", not the name of a file in the directory");
    }
    index.weight_map.emplace(tensor, file.get<std::string>());
  }
  if (index.weight_map.empty()) refuse(where, "the weight_map names no tensor");
  if (json.contains("metadata") && json["metadata"].is_object() && json["metadata"].contains("total_size")) {
    const Json& total = json["metadata"]["total_size"];
    if (!total.is_number_integer() || total.get<std::int64_t>() < 0) {
      refuse(where, "metadata.total_size is " + total.dump() + "; it must be a byte count");
    }
    index.total_size = total.get<std::int64_t>();
  }
  return index;
}

HfWeights open_hf_weights(const std::string& directory) {
  const fs::path dir(directory);
  std::error_code ec;
  const bool indexed = fs::exists(dir / kIndexFile, ec);
  if (!indexed && !fs::exists(dir / kSingleFile, ec)) {
    refuse(directory, std::string("neither ") + kSingleFile + " nor " + kIndexFile +
                          " is here; a Hugging Face model directory holds its weights as safetensors");
  }
  const std::string index_path = (dir / kIndexFile).string();
  const HfIndex index =
      indexed ? parse_hf_index(sys::read_small_file<CheckpointError>(index_path, kMaxIndexBytes, "a weights index"),
                               index_path)
              : HfIndex{};
  auto shards = std::make_shared<Shards>();
  HfWeights out;
  std::set<std::string> seen;
  std::int64_t bytes = 0;
  const auto plan = indexed ? planned_shards(index) : std::map<std::string, std::set<std::string>>{{kSingleFile, {}}};
  for (const auto& [file_name, expected] : plan) {
    if (!fs::exists(dir / file_name, ec)) refuse(index_path, "names " + file_name + ", which is not in the directory");
  }
  for (const auto& [file_name, expected] : plan) {
    const std::string path = (dir / file_name).string();
    auto file = std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(path));
    for (const io::StTensorInfo& t : file->header().tensors) {
      if (!seen.insert(t.name).second) refuse(path, "tensor '" + t.name + "' is in another shard too");
      if (indexed && expected.count(t.name) == 0) {
        const auto named = index.weight_map.find(t.name);
        refuse(path, "holds tensor '" + t.name + "', which the index puts " +
                         (named == index.weight_map.end() ? std::string("nowhere") : "in " + named->second));
      }
      const at::ScalarType type = float_type(t.dtype, path, t.name);
      // Read-only by contract: the mapping is PROT_READ, so a write would fault rather than corrupt.
      void* data = const_cast<std::uint8_t*>(file->bytes(t));
      out.tensors.emplace_back(t.name, at::from_blob(data, t.shape, at::TensorOptions().dtype(type)));
      bytes += t.end - t.begin;
    }
    for (const std::string& name : expected) {
      if (seen.count(name) == 0) refuse(path, "lacks tensor '" + name + "', which the index puts there");
    }
    shards->files.push_back(std::move(file));
  }
  if (index.total_size >= 0 && index.total_size != bytes) {
    refuse(index_path, "metadata.total_size is " + std::to_string(index.total_size) + " bytes, but the shards' " +
                           "tensors hold " + std::to_string(bytes));
  }
  out.keep_alive = shards;
  return out;
}

}  // namespace hpctrain::weights
