#include "hpctrain/weights/hf_writer.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hpctrain/core/error.h"
#include "hpctrain/weights/weight_writer.h"

namespace hpctrain::weights {
namespace {

std::int64_t bytes_of(const TensorToWrite& tensor, at::ScalarType dtype) {
  std::int64_t elements = 1;
  for (const std::int64_t d : tensor.shape) elements *= d;
  return elements * static_cast<std::int64_t>(c10::elementSize(dtype));
}

// The tensors' indices, shard by shard, in order: a shard takes tensors while they fit.
std::vector<std::vector<size_t>> plan_shards(const std::vector<TensorToWrite>& tensors, at::ScalarType dtype,
                                             std::int64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards;
  std::int64_t filled = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::int64_t bytes = bytes_of(tensors[i], dtype);
    if (shards.empty() || (filled > 0 && filled + bytes > max_shard_bytes)) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().push_back(i);
    filled += bytes;
  }
  return shards;
}

std::string shard_name(size_t k, size_t count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, count);
  return name;
}

}  // namespace

HfWeightsWritten write_hf_weights(const std::string& directory, const std::vector<TensorToWrite>& tensors,
                                  at::ScalarType dtype, std::int64_t max_shard_bytes) {
  const std::vector<std::vector<size_t>> shards = plan_shards(tensors, dtype, max_shard_bytes);
  HfWeightsWritten written;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string file = shards.size() == 1 ? "model.safetensors" : shard_name(k, shards.size());
    ckpt::NamedTensors shard;
    for (const size_t i : shards[k]) {
      const TensorToWrite& t = tensors[i];
      const at::Tensor tensor = t.read().to(dtype).contiguous();
      HT_CHECK(tensor.sizes().vec() == t.shape, "a tensor to write read as another shape than described");
      shard.emplace_back(t.name, tensor);
      weight_map[t.name] = file;
      written.total_bytes += bytes_of(t, dtype);
    }
    write_weights((std::filesystem::path(directory) / file).string(), shard, WeightFormat::kSafetensors, {});
    ++written.files;
  }
  if (shards.size() > 1) {
    const nlohmann::json index{{"metadata", {{"total_size", written.total_bytes}}}, {"weight_map", weight_map}};
    const std::string path = (std::filesystem::path(directory) / "model.safetensors.index.json").string();
    std::ofstream out(path);
    out << index.dump(2) << "\n";
    if (!out) throw Error("cannot write " + path + " (check the path and free space)", ExitCode::kUsage);
  }
  return written;
}

}  // namespace hpctrain::weights
