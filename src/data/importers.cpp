// `hpctrain prepare`: the checks and the atomic publish every format shares, and the dispatch.
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "importer_formats.h"

namespace hpctrain::data {
namespace fs = std::filesystem;
namespace {

using Importer = std::function<void(const ImportOptions&, const std::string&, Manifest&)>;

const std::vector<std::pair<std::string, Importer>>& importers() {
  static const std::vector<std::pair<std::string, Importer>> table{
      {"fashion-mnist", [](const ImportOptions& o, const std::string& d, Manifest& m) { import_idx("fashion-mnist", o, d, m); }},
      {"mnist", [](const ImportOptions& o, const std::string& d, Manifest& m) { import_idx("mnist", o, d, m); }},
      {"npy", import_npy},
      {"text", import_text},
  };
  return table;
}

}  // namespace

std::vector<std::string> importer_names() {
  std::vector<std::string> names;
  for (const auto& [name, importer] : importers()) names.push_back(name);
  return names;
}

void import_dataset(const std::string& format, const ImportOptions& options) {
  const Importer* importer = nullptr;
  for (const auto& [name, candidate] : importers()) {
    if (name == format) importer = &candidate;
  }
  if (importer == nullptr) {
    std::string known;
    for (const auto& name : importer_names()) known += (known.empty() ? "" : "|") + name;
    throw ConfigError("prepare: unknown dataset format '" + format + "' (allowed: " + known + ")");
  }
  if (options.out.empty()) throw ConfigError("prepare: --out DIR is required");
  if (!(options.test_fraction > 0.0 && options.test_fraction < 1.0)) {
    throw ConfigError("prepare: --test-fraction must be in (0, 1)");
  }
  const fs::path out = fs::absolute(options.out).lexically_normal();
  if (fs::exists(out) && !options.overwrite) {
    throw ConfigError("prepare: '" + options.out + "' already exists; pass --overwrite to replace it");
  }
  if (!fs::exists(options.source)) {
    throw DataError("prepare: source '" + options.source + "' does not exist");
  }
  fs::create_directories(out.parent_path());
  const std::string pid = std::to_string(getpid());
  const fs::path temp = out.parent_path() / (out.filename().string() + ".tmp-" + pid);
  sys::remove_tree(temp.string());
  fs::create_directories(temp);
  try {
    log::info("importing {} from {}", format, options.source);
    Manifest manifest;
    (*importer)(options, temp.string(), manifest);
    manifest.save(temp.string());
    // Replace an old dataset only now that the new one is complete.
    const fs::path old = out.parent_path() / (out.filename().string() + ".old-" + pid);
    if (fs::exists(out)) fs::rename(out, old);
    sys::publish_atomically(temp.string(), out.string());
    sys::remove_tree(old.string());
  } catch (...) {
    try {
      sys::remove_tree(temp.string());
    } catch (const Error&) {  // the import's own error is the one to report
    }
    throw;
  }
  log::info("wrote {}", out.string());
}

}  // namespace hpctrain::data
