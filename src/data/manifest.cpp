#include "hpctrain/data/manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
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
}

// Every integer of a manifest is a count or a size: a JSON integer from 0 to 2^63-1 (not 2.0:
// hpctrain writes integers). nlohmann's get<int64_t> would convert 1e308 or 2^64-1 silently (or
// with undefined behaviour), so the kind and range are checked first. `what` names the entry,
// e.g. "'samples' of shard 'a.h5'".
std::int64_t as_count(const json& value, const std::string& manifest_path, const std::string& what) {
  constexpr auto kMost = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  const bool fits = value.is_number_unsigned() ? value.get<std::uint64_t>() <= kMost
                                               : value.is_number_integer() && value.get<std::int64_t>() >= 0;
  if (!fits) {
    throw DataError(manifest_path + ": " + what + " is " + value.dump() +
                    "; it must be a JSON integer from 0 to 2^63-1");
  }
  return value.get<std::int64_t>();
}

// The tokenizer of a token stream: bytes, gpt2 with exactly its two files, or hf with its one (plain names: they
// are opened inside the dataset directory).
TokenizerSpec read_tokenizer(const json& j, const std::string& path) {
  TokenizerSpec spec;
  spec.name = j.at("name").get<std::string>();
  for (const auto& [file, checksum] : j.at("files").items()) spec.files[file] = checksum.get<std::string>();
  const bool bytes = spec.name == "bytes" && spec.files.empty();
  const bool gpt2 = spec.name == "gpt2" && spec.files.size() == 2 && spec.files.count("encoder.json") == 1 &&
                    spec.files.count("vocab.bpe") == 1;
  const bool hf = spec.name == "hf" && spec.files.size() == 1 && spec.files.count("tokenizer.json") == 1;
  if (!bytes && !gpt2 && !hf) {
    throw DataError(path + ": 'tokenizer' must be bytes (no files), gpt2 (encoder.json and vocab.bpe) or hf "
                    "(tokenizer.json)");
  }
  return spec;
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
    const std::int64_t version = as_count(j.at("version"), path, "'version'");
    if (version > kManifestVersion) {
      throw DataError(path + ": format version " + std::to_string(version) +
                      " is newer than this hpctrain reads (" + std::to_string(kManifestVersion) +
                      "); upgrade hpctrain");
    }
    m.version = static_cast<int>(version);
    m.name = j.at("name").get<std::string>();
    m.num_classes = as_count(j.at("num_classes"), path, "'num_classes'");
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
      std::vector<std::int64_t> shape;
      const json& extents = f.at("shape");
      if (!extents.is_array()) throw DataError(path + ": 'shape' of field '" + field_name + "' is not a list");
      for (const auto& extent : extents) {
        shape.push_back(as_count(extent, path, "'shape' of field '" + field_name + "'"));
      }
      m.fields.push_back({field_name, dtype, shape});
    }
    for (const auto& [split_name, s] : j.at("splits").items()) {
      SplitSpec split;
      std::int64_t total = 0;
      for (const auto& shard : s.at("shards")) {
        const std::string file = shard.at("file").get<std::string>();
        const std::string what = "'samples' of shard '" + file + "' in split '" + split_name + "'";
        split.shards.push_back({file, as_count(shard.at("samples"), path, what)});
        check_shard_entry(path, split_name, split.shards.back());
        if (split.shards.back().samples > std::numeric_limits<std::int64_t>::max() - total) {
          throw DataError(path + ": split '" + split_name +
                          "' counts more samples than 64 bits hold; the manifest is damaged");
        }
        total += split.shards.back().samples;
      }
      m.splits[split_name] = split;
    }
    if (j.contains("tokenizer")) m.tokenizer = read_tokenizer(j.at("tokenizer"), path);
  } catch (const json::exception& e) {
    throw DataError(path + ": malformed manifest: " + e.what());
  }
  if (!(m.input_std > 0)) throw DataError(path + ": input_std must be > 0");
  if (m.fields.empty()) throw DataError(path + ": 'fields' is empty; a dataset has at least one field");
  return m;
}

void Manifest::save(const std::string& dataset_dir) const {
  // JSON has no NaN or infinity (nlohmann writes null): such a manifest would not load again.
  HT_CHECK(std::isfinite(input_mean) && std::isfinite(input_std),
           "Manifest::save: input_mean and input_std must be finite");
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
  if (tokenizer.name != "bytes") j["tokenizer"] = {{"name", tokenizer.name}, {"files", tokenizer.files}};
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
