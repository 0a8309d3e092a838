#include "tiny_dataset.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <numeric>
#include <vector>

#include "fuzz_target.h"
#include "hpctrain/core/error.h"
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
  manifest.fields = {{"image", io::DType::kUInt8, kTinyImageShape}, {"label", io::DType::kInt64, {}}};
  for (const auto& [split, samples] :
       {std::pair<std::string, std::int64_t>{"train", kTinyTrainSamples}, {"test", 4}}) {
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
    // Read into memory (data.io=posix) and from the mapped files (mmap, the default).
    for (const data::ShardAccess access : {data::ShardAccess::kRead, data::ShardAccess::kMap}) {
      const data::Split split = data::Split::load(dir, name, /*cache_bytes=*/std::int64_t{1} << 20, access);
      std::vector<std::int64_t> everything(static_cast<size_t>(split.size()));
      std::iota(everything.begin(), everything.end(), std::int64_t{0});
      const data::Batch batch = split.gather(everything);
      (void)split.normalize(batch.input).sum().item<double>();
      if (split.size() > 1) (void)split.range(1, split.size() - 1);
    }
  }
}

void write_tiny_dataset_seed(const std::string& file, const std::string& dir, const std::string& seed) {
  const std::string dataset = scratch_dir() + "/seed-dataset";
  write_tiny_dataset(dataset);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(dataset + "/" + file, dir + "/" + seed, std::filesystem::copy_options::overwrite_existing);
}

int fuzz_tiny_dataset_file(const std::string& file, const std::uint8_t* data, std::size_t size) {
  static const std::string dir = [] {
    silence_logs();
    const std::string path = scratch_dir() + "/dataset";
    write_tiny_dataset(path);
    return path;
  }();
  write_file(dir + "/" + file, data, size);
  try {
    read_dataset_like_a_run(dir);
    record(Outcome::kAccepted);
  } catch (const Error& e) {
    if (e.code() != ExitCode::kData) throw;
    record(Outcome::kRefused);  // with a message: what a user sees
  }
  expect_no_open_hdf5_objects();
  return 0;
}

}  // namespace hpctrain::fuzz
