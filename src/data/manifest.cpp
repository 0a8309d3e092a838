#include "hpctrain/data/manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

namespace hpctrain::data {

using json = nlohmann::json;

std::int64_t SplitSpec::samples() const {
  std::int64_t total = 0;
  for (const auto& shard : shards) total += shard.samples;
  return total;
}

namespace {

// A shard is a file of the dataset directory: a manifest never points outside it (a damaged or
// hostile one could name a device or another dataset's file).
void check_shard_entry(const std::string& manifest_path, const std::string& split, const ShardSpec& shard) {
  const std::filesystem::path file(shard.file);
  const bool inside = !shard.file.empty() && file.is_relative() &&
                      std::none_of(file.begin(), file.end(), [](const auto& part) { return part == ".."; });
  if (!inside) {
    throw DataError(manifest_path + ": shard '" + shard.file + "' of split '" + split +
                    "' is not a file name inside the dataset directory");
  }
  if (shard.samples < 0) {
    throw DataError(manifest_path + ": shard '" + shard.file + "' of split '" + split + "' has a negative sample count");
  }
}

}  // namespace

Manifest Manifest::load(const std::string& dataset_dir) {
  const std::string path = (std::filesystem::path(dataset_dir) / kManifestFile).string();
  if (!std::filesystem::is_directory(dataset_dir)) {
    throw DataError("dataset '" + dataset_dir + "' not found (set data.path to a directory written "
                    "by `hpctrain prepare`)");
  }
  std::ifstream in(path);
  if (!in) {
    throw DataError(path + " not found: '" + dataset_dir + "' is not an hpctrain dataset (make one "
                    "with `hpctrain prepare`)");
  }
  Manifest m;
  try {
    const json j = json::parse(in);
    m.version = j.at("version").get<int>();
    if (m.version > kManifestVersion) {
      throw DataError(path + ": format version " + std::to_string(m.version) +
                      " is newer than this hpctrain reads (" + std::to_string(kManifestVersion) +
                      "); upgrade hpctrain");
    }
    m.name = j.at("name").get<std::string>();
    m.num_classes = j.at("num_classes").get<std::int64_t>();
    m.input_mean = j.at("input_mean").get<double>();
    m.input_std = j.at("input_std").get<double>();
    for (const auto& f : j.at("fields")) {
      const std::string field_name = f.at("name").get<std::string>();
      io::DType dtype;
      try {
        dtype = io::dtype_from_name(f.at("dtype").get<std::string>(), ExitCode::kData);
      } catch (const Error& e) {
        throw DataError(path + ": field '" + field_name + "': " + e.what());
      }
      m.fields.push_back({field_name, dtype, f.at("shape").get<std::vector<std::int64_t>>()});
    }
    for (const auto& [split_name, s] : j.at("splits").items()) {
      SplitSpec split;
      std::int64_t total = 0;
      for (const auto& shard : s.at("shards")) {
        split.shards.push_back({shard.at("file").get<std::string>(), shard.at("samples").get<std::int64_t>()});
        check_shard_entry(path, split_name, split.shards.back());
        if (split.shards.back().samples > std::numeric_limits<std::int64_t>::max() - total) {
          throw DataError(path + ": split '" + split_name + "' counts more samples than 64 bits hold; the manifest is damaged");
        }
        total += split.shards.back().samples;
      }
      m.splits[split_name] = split;
    }
  } catch (const json::exception& e) {
    throw DataError(path + ": malformed manifest: " + e.what());
  }
  if (!(m.input_std > 0)) throw DataError(path + ": input_std must be > 0");
  if (m.fields.empty()) throw DataError(path + ": 'fields' is empty; a dataset has at least one field");
  return m;
}

void Manifest::save(const std::string& dataset_dir) const {
  json j;
  j["format"] = "hpctrain-dataset";
  j["version"] = version;
  j["name"] = name;
  j["num_classes"] = num_classes;
  j["input_mean"] = input_mean;
  j["input_std"] = input_std;
  j["fields"] = json::array();
  for (const auto& f : fields) {
    j["fields"].push_back({{"name", f.name}, {"dtype", io::dtype_name(f.dtype)}, {"shape", f.shape}});
  }
  j["splits"] = json::object();
  for (const auto& [split_name, split] : splits) {
    json shards = json::array();
    for (const auto& shard : split.shards) shards.push_back({{"file", shard.file}, {"samples", shard.samples}});
    j["splits"][split_name] = {{"samples", split.samples()}, {"shards", shards}};
  }
  const std::string path = (std::filesystem::path(dataset_dir) / kManifestFile).string();
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw DataError("cannot write " + path);
}

const FieldSpec& Manifest::field(const std::string& field_name) const {
  for (const auto& f : fields) {
    if (f.name == field_name) return f;
  }
  throw DataError("dataset '" + name + "' has no field '" + field_name + "'");
}

const SplitSpec& Manifest::split(const std::string& split_name) const {
  const auto it = splits.find(split_name);
  if (it == splits.end()) {
    std::string known;
    for (const auto& [n, s] : splits) known += (known.empty() ? "" : ", ") + n;
    throw DataError("dataset '" + name + "' has no split '" + split_name + "' (it has: " + known + ")");
  }
  return it->second;
}

}  // namespace hpctrain::data
