#include "hpctrain/data/augment.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <set>
#include <tuple>

namespace hpctrain::data {
namespace {

AugmentOptions crop_and_flip(std::int64_t padding, bool flip) {
  AugmentOptions o;
  o.crop_padding = padding;
  o.flip = flip;
  o.seed = 42;
  return o;
}

// The reference: pad with zeros, cut the window at (padding + dy, padding + dx), then flip.
at::Tensor reference(const at::Tensor& image, const SampleAugmentation& draw, std::int64_t padding) {
  const std::int64_t h = image.size(-2);
  const std::int64_t w = image.size(-1);
  at::Tensor padded = at::constant_pad_nd(image, {padding, padding, padding, padding}, 0);
  at::Tensor out = padded.narrow(-2, padding + draw.dy, h).narrow(-1, padding + draw.dx, w);
  return draw.flip ? out.flip({-1}) : out.contiguous();
}

TEST(Augment, CropAndFlipEqualPadCutFlipForEveryDtypeAndLayout) {
  for (const auto dtype : {at::kByte, at::kFloat, at::kLong}) {
    for (const bool channels : {false, true}) {
      const at::Tensor images = channels ? at::arange(6 * 3 * 5 * 7, at::kLong).reshape({6, 3, 5, 7}).to(dtype)
                                         : at::arange(6 * 5 * 7, at::kLong).reshape({6, 5, 7}).to(dtype);
      const std::vector<std::int64_t> indices{0, 7, 12, 99, 1000, 3};
      const AugmentOptions options = crop_and_flip(2, true);
      at::Tensor augmented = images.clone();
      augment_in_place(augmented, indices, 4, options);
      for (std::int64_t b = 0; b < 6; ++b) {
        const SampleAugmentation draw = draw_augmentation(options, 4, indices[static_cast<size_t>(b)]);
        EXPECT_TRUE(at::equal(augmented[b], reference(images[b], draw, 2)))
            << "sample " << b << " dy " << draw.dy << " dx " << draw.dx << " flip " << draw.flip;
      }
    }
  }
}

TEST(Augment, DrawsDependOnSeedEpochAndIndexOnlyAndCoverTheRange) {
  const AugmentOptions options = crop_and_flip(2, true);
  std::set<std::tuple<std::int64_t, std::int64_t, bool>> seen;
  for (std::int64_t index = 0; index < 2000; ++index) {
    const SampleAugmentation d = draw_augmentation(options, 1, index);
    ASSERT_GE(d.dy, -2);
    ASSERT_LE(d.dy, 2);
    ASSERT_GE(d.dx, -2);
    ASSERT_LE(d.dx, 2);
    seen.insert({d.dy, d.dx, d.flip});
  }
  EXPECT_EQ(seen.size(), 50u);  // every offset pair, flipped and not
  const auto same = [](const SampleAugmentation& a, const SampleAugmentation& b) {
    return a.dy == b.dy && a.dx == b.dx && a.flip == b.flip;
  };
  EXPECT_TRUE(same(draw_augmentation(options, 3, 17), draw_augmentation(options, 3, 17)));
  int epoch_differs = 0;
  int seed_differs = 0;
  AugmentOptions other_seed = options;
  other_seed.seed = 43;
  for (std::int64_t index = 0; index < 100; ++index) {
    epoch_differs += !same(draw_augmentation(options, 3, index), draw_augmentation(options, 4, index));
    seed_differs += !same(draw_augmentation(options, 3, index), draw_augmentation(other_seed, 3, index));
  }
  EXPECT_GT(epoch_differs, 80);
  EXPECT_GT(seed_differs, 80);
}

TEST(Augment, FlipAloneMirrorsAboutHalfTheImagesAndNothingElse) {
  const at::Tensor images = at::rand({400, 1, 4, 6});
  at::Tensor augmented = images.clone();
  std::vector<std::int64_t> indices(400);
  for (std::int64_t i = 0; i < 400; ++i) indices[static_cast<size_t>(i)] = i;
  augment_in_place(augmented, indices, 0, crop_and_flip(0, true));
  int flipped = 0;
  for (std::int64_t b = 0; b < 400; ++b) {
    const bool mirrored = at::equal(augmented[b], images[b].flip({-1}));
    ASSERT_TRUE(mirrored || at::equal(augmented[b], images[b])) << b;
    flipped += mirrored;
  }
  EXPECT_GT(flipped, 150);
  EXPECT_LT(flipped, 250);
  at::Tensor untouched = images.clone();
  augment_in_place(untouched, indices, 0, AugmentOptions{});
  EXPECT_TRUE(at::equal(untouched, images));
}

}  // namespace
}  // namespace hpctrain::data
