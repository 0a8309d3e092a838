#include "hpctrain/io/fletcher32.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace hpctrain::io {
namespace {

// HDF5's own loop (H5_checksum_fletcher32, H5checksum.c), transcribed as the reference.
std::uint32_t hdf5_fletcher32(const unsigned char* data, size_t bytes) {
  size_t len = bytes / 2;
  std::uint32_t sum1 = 0;
  std::uint32_t sum2 = 0;
  while (len) {
    size_t tlen = len > 360 ? 360 : len;
    len -= tlen;
    do {
      sum1 += static_cast<std::uint32_t>((static_cast<std::uint16_t>(data[0]) << 8) | data[1]);
      data += 2;
      sum2 += sum1;
    } while (--tlen);
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (bytes % 2) {
    sum1 += static_cast<std::uint32_t>(static_cast<std::uint16_t>(*data) << 8);
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

TEST(Fletcher32, EqualsHdf5sLoopForEveryLengthAndPattern) {
  std::mt19937 random(7);
  std::vector<unsigned char> data(6000);
  // Lengths across the 360-word blocks and the 8-word lanes, odd and even; all-0xff data makes
  // HDF5's uint32 sums wrap inside a block, which must be reproduced, not avoided.
  for (size_t bytes : {0, 1, 2, 3, 15, 16, 17, 719, 720, 721, 722, 1440, 1441, 4999, 6000}) {
    for (int pattern = 0; pattern < 4; ++pattern) {
      for (size_t i = 0; i < bytes; ++i) {
        data[i] = pattern == 0 ? 0x00 : pattern == 1 ? 0xff : pattern == 2 ? static_cast<unsigned char>(random()) : (i < bytes / 2 ? 0xff : 0x01);
      }
      EXPECT_EQ(fletcher32(data.data(), bytes), hdf5_fletcher32(data.data(), bytes))
          << bytes << " bytes, pattern " << pattern;
    }
  }
  std::vector<unsigned char> chunk(1 << 20, 0xff);
  EXPECT_EQ(fletcher32(chunk.data(), chunk.size()), hdf5_fletcher32(chunk.data(), chunk.size()));
  for (auto& byte : chunk) byte = static_cast<unsigned char>(random());
  EXPECT_EQ(fletcher32(chunk.data(), chunk.size()), hdf5_fletcher32(chunk.data(), chunk.size()));
}

TEST(Fletcher32, AcceptsTheValueOrItsHalvesByteSwappedOnly) {
  EXPECT_TRUE(fletcher32_matches(0x12345678u, 0x12345678u));
  EXPECT_TRUE(fletcher32_matches(0x34127856u, 0x12345678u));
  EXPECT_FALSE(fletcher32_matches(0x78563412u, 0x12345678u));
  EXPECT_FALSE(fletcher32_matches(0x12345679u, 0x12345678u));
}

}  // namespace
}  // namespace hpctrain::io
