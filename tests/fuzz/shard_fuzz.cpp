// A dataset shard: the HDF5 file of the training split, replaced by the input, read beside a
// valid manifest by everything a run and `hpctrain data inspect --verify` read.
#include <string>

#include "fuzz_target.h"
#include "tiny_dataset.h"

namespace hpctrain::fuzz {

void write_seeds(const std::string& dir) { write_tiny_dataset_seed(kTinyTrainShard, dir, "tiny-train-shard.h5"); }

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return hpctrain::fuzz::fuzz_tiny_dataset_file(hpctrain::fuzz::kTinyTrainShard, data, size);
}
