// A Source over a sample split: DistributedSampler's plan, Split::gather and augmentation on the
// loader's threads, normalization where the batch is finished.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/data/distributed_sampler.h"
#include "hpctrain/data/sample_keys.h"
#include "hpctrain/data/source.h"

namespace hpctrain::data {
namespace {

class SampleSource final : public Source {
 public:
  SampleSource(Split split, SourceOptions options) : split_(std::move(split)), options_(std::move(options)) {}

  std::unique_ptr<Sampler> sampler(int world_size, int rank) const override {
    SamplerOptions sampling;
    sampling.dataset_size = split_.size();
    sampling.world_size = world_size;
    sampling.rank = rank;
    sampling.batch_size = options_.batch_size;
    sampling.seed = options_.seed;
    sampling.shuffle = options_.shuffle;
    sampling.drop_last = options_.drop_last;
    set_shuffle_window(split_.manifest(), options_.split, options_.shuffle_window_mb, sampling);
    check_shuffle_window(split_, sampling);
    say_how_the_split_is_read(sampling);
    return std::make_unique<DistributedSampler>(sampling);
  }

  std::string describe() const override { return fmt::format("{} samples", split_.size()); }

  std::int64_t cache_bytes_to_come() const override {
    const std::int64_t blocks = std::max<std::int64_t>(0, split_.blocks_held_at_most() - split_.blocks_read());
    return blocks * split_.block_cache_bytes();
  }

  Batch read(std::int64_t epoch, const SamplerStep& step) const override {
    Batch batch = split_.gather(step.indices, options_.pinned);
    augment_in_place(batch.input, step.indices, epoch, options_.augment);
    batch.keys = sample_keys(options_.seed, epoch, step.indices);
    return with_weights(std::move(batch), step);
  }

  // The copy is of the stored bytes (uint8 pixels: a quarter of float32's); the arithmetic is the
  // device's.
  Batch finish(const Batch& batch, c10::Device device) const override {
    return on_device(batch, split_.normalize(batch.input.to(device, /*non_blocking=*/true)), device);
  }

  std::int64_t items() const override { return split_.size(); }
  Batch read_items(std::int64_t first, std::int64_t count) const override {
    Batch batch = split_.range(first, count);
    std::vector<std::int64_t> indices(static_cast<std::size_t>(count));
    std::iota(indices.begin(), indices.end(), first);
    batch.keys = sample_keys(options_.seed, kEvaluationEpoch, indices);
    return batch;
  }
  std::int64_t tokens_per_item() const override { return 0; }

  void read_collectively(int world_size) const override {
    if (options_.io != config::DataIo::kMpio) return;
    if (!split_.caches_blocks()) {
      log::warn("data.io=mpio applies to a split held in memory; '{}' is larger than data.cache_mb={} "
                "and is read block by block with POSIX reads",
                options_.split, options_.cache_mb);
      return;
    }
    const Timer timer;
    split_.preload_collective();
    log::info("split '{}' read through MPI-IO by {} rank(s) in {:.2f} s", options_.split, world_size,
              timer.elapsed_s());
  }

 private:
  // A shuffle by chunks, or a global shuffle of a split that will not stay in memory: said once.
  void say_how_the_split_is_read(const SamplerOptions& sampling) const {
    warn_of_mapped_reads(sampling);
    if (options_.shuffle && !sampling.block_starts.empty()) {
      log::info("shuffling by chunks (data.shuffle_window_mb={}): {} blocks, the samples of {} at a time mixed",
                options_.shuffle_window_mb, sampling.block_starts.size(), sampling.window_blocks);
    } else if (options_.shuffle && !split_.caches_blocks()) {
      log::warn("split '{}' is larger than data.cache_mb={}: a global shuffle reads about one ~1 MiB "
                "chunk per sample; set data.shuffle_window_mb (e.g. {}) to shuffle by chunks, or raise "
                "data.cache_mb", options_.split, options_.cache_mb,
                std::max<std::int64_t>(1, options_.cache_mb / 4));
    }
  }

  // Mapped, a global shuffle reads the page cache; a split larger than the memory this job may use
  // reads the file system for about every sample.
  void warn_of_mapped_reads(const SamplerOptions& sampling) const {
    const std::int64_t memory = sys::memory_limit_bytes();
    if (split_.maps_files() && options_.shuffle && sampling.block_starts.empty() && memory > 0 &&
        split_.input_bytes() > memory) {
      log::warn("split '{}' ({} MiB) is larger than the memory this job may use ({} MiB): a global shuffle "
                "of the mapped files reads about one page from the file system per sample; set "
                "data.shuffle_window_mb to shuffle by chunks",
                options_.split, split_.input_bytes() >> 20, memory >> 20);
    }
  }

  Split split_;
  SourceOptions options_;
};

}  // namespace

std::shared_ptr<const Source> sample_source(Split split, SourceOptions options) {
  return std::make_shared<SampleSource>(std::move(split), std::move(options));
}

}  // namespace hpctrain::data
