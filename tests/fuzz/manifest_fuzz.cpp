// The dataset manifest: manifest.json as `hpctrain train` and `hpctrain data inspect` read it,
// beside valid shards, with everything a run then reads through it.
#include <string>

#include "fuzz_target.h"
#include "hpctrain/data/manifest.h"
#include "tiny_dataset.h"

namespace hpctrain::fuzz {

void write_seeds(const std::string& dir) { write_tiny_dataset_seed(data::kManifestFile, dir, "tiny-manifest.json"); }

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return hpctrain::fuzz::fuzz_tiny_dataset_file(hpctrain::data::kManifestFile, data, size);
}
