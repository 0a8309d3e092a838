// Training-time augmentation of image batches: a random crop after zero padding, and a random
// horizontal flip (torchvision's RandomCrop(padding=p) then RandomHorizontalFlip). Each sample's
// crop offset and flip come from (seed, epoch, sample index) alone, so a sample is augmented the
// same way at any world size and after a resume, and differently from epoch to epoch.
// Works on the stored bytes of any dtype, on the loader's threads. Depends on core, ATen.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace hpctrain::data {

struct AugmentOptions {
  std::int64_t crop_padding = 0;  // 0: no crop
  bool flip = false;
  std::uint64_t seed = 0;

  bool enabled() const { return crop_padding > 0 || flip; }
};

// One sample's draw: rows and columns to shift by (in [-padding, padding]) and whether to flip.
struct SampleAugmentation {
  std::int64_t dy = 0;
  std::int64_t dx = 0;
  bool flip = false;
};
SampleAugmentation draw_augmentation(const AugmentOptions& options, std::int64_t epoch, std::int64_t index);

// Augments `images` ([B, C, H, W] or [B, H, W], contiguous, on the CPU) in place; `indices` are
// the batch's dataset indices, one per image. Output pixel (y, x) is input pixel
// (y + dy, (flip ? W-1-x : x) + dx), zero where that falls outside the image.
void augment_in_place(at::Tensor& images, const std::vector<std::int64_t>& indices, std::int64_t epoch,
                      const AugmentOptions& options);

}  // namespace hpctrain::data
