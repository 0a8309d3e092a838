#include "hpctrain/core/units.h"

#include <gtest/gtest.h>

#include "hpctrain/core/error.h"

namespace hpctrain {
namespace {

TEST(Units, ParsesBytesWithAndWithoutUnits) {
  EXPECT_EQ(parse_bytes("1048576", "x"), 1048576);
  EXPECT_EQ(parse_bytes("64KiB", "x"), 64 * 1024);
  EXPECT_EQ(parse_bytes("256MiB", "x"), 256LL << 20);
  EXPECT_EQ(parse_bytes("2GiB", "x"), 2LL << 30);
  EXPECT_EQ(parse_bytes("1.5GB", "x"), 1500000000);
  EXPECT_EQ(parse_bytes("10B", "x"), 10);
}

TEST(Units, RejectsNonSizesNamingTheOption) {
  for (const char* bad : {"", "MiB", "12 parsecs", "-5", "0", "1e400"}) {
    try {
      parse_bytes(bad, "--shard-size");
      FAIL() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--shard-size"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace hpctrain

#include "hpctrain/core/progress.h"

namespace hpctrain {
namespace {

TEST(ProgressBar, RendersFractionAndCounts) {
  EXPECT_EQ(ProgressBar::render("train", 3, 6), "train [===============               ] 50% 3/6");
  EXPECT_EQ(ProgressBar::render("x", 9, 4), "x [==============================] 100% 4/4");
}

TEST(Units, BytesTextPicksTheLargestUnitAboveOne) {
  EXPECT_EQ(bytes_text(512), "512 B");
  EXPECT_EQ(bytes_text(2272), "2.22 KiB");
  EXPECT_EQ(bytes_text(std::int64_t{85} << 20), "85.0 MiB");
  EXPECT_EQ(bytes_text(std::int64_t{1300} << 20), "1.27 GiB");
  EXPECT_EQ(bytes_text(std::int64_t{200} << 20), "200 MiB");
}

}  // namespace
}  // namespace hpctrain
