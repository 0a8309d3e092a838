// The options every Source takes from the config.
#include "hpctrain/data/source.h"

namespace hpctrain::data {

SourceOptions source_options(const config::Config& config, const std::string& split, bool pinned) {
  SourceOptions options;
  options.split = split;
  options.batch_size = config.train.batch_size;
  options.seed = static_cast<std::uint64_t>(config.train.seed);
  options.shuffle = config.train.shuffle;
  options.drop_last = config.train.drop_last;
  options.shuffle_window_mb = config.data.shuffle_window_mb;
  options.cache_mb = config.data.cache_mb;
  options.io = config.data.io;
  options.augment.crop_padding = config.data.random_crop;
  options.augment.flip = config.data.random_flip;
  options.augment.seed = static_cast<std::uint64_t>(config.train.seed);
  options.pinned = pinned;
  return options;
}

}  // namespace hpctrain::data
