// A Source over a token stream: TokenWindowSampler's windows at random offsets, read as they are
// (token ids need no normalization); evaluation lays windows end to end.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <numeric>

#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/data/source.h"
#include "hpctrain/data/token_windows.h"

namespace hpctrain::data {
namespace {

class TokenSource final : public Source {
 public:
  TokenSource(TokenStream stream, SourceOptions options) : stream_(std::move(stream)), options_(std::move(options)) {}

  std::unique_ptr<Sampler> sampler(int world_size, int rank) const override {
    if (!options_.shuffle) {
      log::warn("train.shuffle=false does not apply to a token stream: its windows start at random offsets "
                "drawn from train.seed");
    }
    TokenWindowOptions windows;
    windows.stream_tokens = stream_.size();
    windows.block_size = stream_.block_size();
    windows.world_size = world_size;
    windows.rank = rank;
    windows.batch_size = options_.batch_size;
    windows.seed = options_.seed;
    return std::make_unique<TokenWindowSampler>(windows);
  }

  std::string describe() const override {
    return fmt::format("a stream of {} tokens ({} windows of {} per epoch, at random offsets)", stream_.size(),
                       (stream_.size() - 1) / stream_.block_size(), stream_.block_size() + 1);
  }

  Batch read(std::int64_t, const SamplerStep& step) const override {
    return with_weights(stream_.gather(step.indices, options_.pinned), step);
  }

  Batch finish(const Batch& batch, c10::Device device) const override {
    return on_device(batch, batch.input.to(device, /*non_blocking=*/true), device);
  }

  std::int64_t cache_bytes_to_come() const override { return stream_.chunk_cache_bytes(); }

  std::int64_t items() const override {
    const std::int64_t windows = (stream_.size() - 1) / stream_.block_size();
    HT_CHECK(windows > 0, "the evaluation stream is shorter than one window");
    return windows;
  }

  Batch read_items(std::int64_t first, std::int64_t count) const override {
    std::vector<std::int64_t> offsets(static_cast<size_t>(count));
    std::iota(offsets.begin(), offsets.end(), first);
    for (auto& offset : offsets) offset *= stream_.block_size();
    return stream_.gather(offsets);
  }

  std::int64_t tokens_per_item() const override { return stream_.block_size(); }

  void read_collectively(int) const override {
    if (options_.io != config::DataIo::kMpio) return;
    log::warn("data.io=mpio reads sample splits; token stream '{}' is read by every rank itself", options_.split);
  }

 private:
  TokenStream stream_;
  SourceOptions options_;
};

}  // namespace

std::shared_ptr<const Source> token_source(TokenStream stream, SourceOptions options) {
  return std::make_shared<TokenSource>(std::move(stream), std::move(options));
}

}  // namespace hpctrain::data
