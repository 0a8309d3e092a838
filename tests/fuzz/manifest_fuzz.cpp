// The dataset manifest: manifest.json as `hpctrain train` and `hpctrain data inspect` read it,
// beside valid shards, with everything a run then reads through it.
#include <filesystem>
#include <string>

#include "fuzz_target.h"
#include "hpctrain/core/error.h"
#include "hpctrain/data/manifest.h"
#include "tiny_dataset.h"

namespace hpctrain::fuzz {

void write_seeds(const std::string& dir) {
  const std::string dataset = scratch_dir() + "/seed-dataset";
  write_tiny_dataset(dataset);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(dataset + "/" + data::kManifestFile, dir + "/tiny-manifest.json",
                             std::filesystem::copy_options::overwrite_existing);
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  static const std::string dir = [] {
    fuzz::silence_logs();
    const std::string path = fuzz::scratch_dir() + "/dataset";
    fuzz::write_tiny_dataset(path);
    return path;
  }();
  fuzz::write_file(dir + "/" + data::kManifestFile, data, size);
  try {
    fuzz::read_dataset_like_a_run(dir);
  } catch (const Error& e) {
    if (e.code() != ExitCode::kData) throw;  // refused with a message: what a user sees
  }
  return 0;
}
