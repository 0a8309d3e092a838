#include "hpctrain/data/augment.h"

#include <cstring>

#include "hpctrain/core/counter_rng.h"
#include "hpctrain/core/error.h"

namespace hpctrain::data {

SampleAugmentation draw_augmentation(const AugmentOptions& options, std::int64_t epoch, std::int64_t index) {
  // A different stream than the token windows' for the same seed: the constant is arbitrary.
  const std::uint64_t h = splitmix64(splitmix64(splitmix64(options.seed ^ 0xA5A5A5A5ULL) ^
                                                static_cast<std::uint64_t>(epoch)) ^
                                     static_cast<std::uint64_t>(index));
  SampleAugmentation out;
  if (options.crop_padding > 0) {
    const auto span = static_cast<std::uint64_t>(2 * options.crop_padding + 1);
    out.dy = static_cast<std::int64_t>((h & 0xFFFFFF) % span) - options.crop_padding;
    out.dx = static_cast<std::int64_t>(((h >> 24) & 0xFFFFFF) % span) - options.crop_padding;
  }
  out.flip = options.flip && ((h >> 63) & 1) != 0;
  return out;
}

void augment_in_place(at::Tensor& images, const std::vector<std::int64_t>& indices, std::int64_t epoch,
                      const AugmentOptions& options) {
  if (!options.enabled()) return;
  HT_CHECK(images.dim() == 3 || images.dim() == 4, "augmentation needs [B, H, W] or [B, C, H, W] images");
  HT_CHECK(images.is_contiguous() && images.device().is_cpu(), "augmentation runs on contiguous host tensors");
  HT_CHECK(images.size(0) == static_cast<std::int64_t>(indices.size()), "one dataset index per image");
  const std::int64_t height = images.size(-2);
  const std::int64_t width = images.size(-1);
  const std::int64_t channels = images.dim() == 4 ? images.size(1) : 1;
  const auto element = static_cast<size_t>(images.element_size());
  const size_t row_bytes = static_cast<size_t>(width) * element;
  const size_t plane_bytes = static_cast<size_t>(height) * row_bytes;
  auto* data = static_cast<std::uint8_t*>(images.data_ptr());
  std::vector<std::uint8_t> source(static_cast<size_t>(channels) * plane_bytes);
  for (size_t b = 0; b < indices.size(); ++b) {
    const SampleAugmentation draw = draw_augmentation(options, epoch, indices[b]);
    if (draw.dy == 0 && draw.dx == 0 && !draw.flip) continue;
    std::uint8_t* image = data + b * source.size();
    std::memcpy(source.data(), image, source.size());
    std::memset(image, 0, source.size());  // zero padding: every pixel not copied below
    for (std::int64_t c = 0; c < channels; ++c) {
      const std::uint8_t* in = source.data() + static_cast<size_t>(c) * plane_bytes;
      std::uint8_t* out = image + static_cast<size_t>(c) * plane_bytes;
      for (std::int64_t y = 0; y < height; ++y) {
        const std::int64_t sy = y + draw.dy;
        if (sy < 0 || sy >= height) continue;
        const std::uint8_t* in_row = in + static_cast<size_t>(sy) * row_bytes;
        std::uint8_t* out_row = out + static_cast<size_t>(y) * row_bytes;
        for (std::int64_t x = 0; x < width; ++x) {
          const std::int64_t sx = (draw.flip ? width - 1 - x : x) + draw.dx;
          if (sx < 0 || sx >= width) continue;
          std::memcpy(out_row + static_cast<size_t>(x) * element, in_row + static_cast<size_t>(sx) * element, element);
        }
      }
    }
  }
}

}  // namespace hpctrain::data
