// What every Source shares: its options from the config, and a micro-batch's weights and copy.
#include "hpctrain/data/source.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace hpctrain::data {

Batch Source::with_weights(Batch batch, const SamplerStep& step) {
  batch.weight = at::tensor(c10::ArrayRef<float>(step.weights));
  batch.real = std::count_if(step.weights.begin(), step.weights.end(), [](float w) { return w > 0; });
  batch.global_real = step.global_real;
  return batch;
}

Batch Source::on_device(const Batch& batch, at::Tensor input, c10::Device device) {
  Batch out = batch;
  out.input = std::move(input);
  out.target = batch.target.to(device, /*non_blocking=*/true);
  if (batch.weight.defined()) out.weight = batch.weight.to(device);
  return out;
}

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
