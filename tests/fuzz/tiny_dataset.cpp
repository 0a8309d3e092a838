#include "tiny_dataset.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <numeric>
#include <vector>

#include "hpctrain/data/dataset_check.h"
#include "hpctrain/data/manifest.h"
#include "hpctrain/data/shard_writer.h"
#include "hpctrain/data/split.h"

namespace hpctrain::fuzz {

void write_tiny_dataset(const std::string& dir) {
  std::filesystem::create_directories(dir);
  data::Manifest manifest;
  manifest.name = "tiny";
  manifest.num_classes = 3;
  manifest.input_mean = 0.5;
  manifest.input_std = 0.25;
  manifest.fields = {{"image", io::DType::kUInt8, {1, 4, 4}}, {"label", io::DType::kInt64, {}}};
  for (const auto& [split, samples] : {std::pair<std::string, std::int64_t>{"train", 12}, {"test", 4}}) {
    std::vector<std::uint8_t> pixels(static_cast<size_t>(samples * 16));
    std::iota(pixels.begin(), pixels.end(), std::uint8_t{7});
    std::vector<std::int64_t> labels(static_cast<size_t>(samples));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 3);
    manifest.splits[split] = data::write_split(dir, split, manifest.fields, {pixels.data(), labels.data()},
                                               samples, data::ShardingOptions{});
  }
  manifest.save(dir);
}

void read_dataset_like_a_run(const std::string& dir) {
  const data::Manifest manifest = data::Manifest::load(dir);
  data::check_structure(dir, manifest);
  data::verify_contents(dir, manifest);
  for (const auto& [name, spec] : manifest.splits) {
    const data::Split split = data::Split::load(dir, name, /*cache_bytes=*/std::int64_t{1} << 20);
    std::vector<std::int64_t> everything(static_cast<size_t>(split.size()));
    std::iota(everything.begin(), everything.end(), std::int64_t{0});
    const data::Batch batch = split.gather(everything);
    (void)split.normalize(batch.input).sum().item<double>();
    if (split.size() > 1) (void)split.range(1, split.size() - 1);
  }
}

}  // namespace hpctrain::fuzz
