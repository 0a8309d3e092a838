// io::write_png, read back by libpng's own reader.
#include "hpctrain/io/png_file.h"

#include <gtest/gtest.h>
#include <png.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "hpctrain/core/error.h"

namespace hpctrain::io {
namespace {

// The image at `path` as 8-bit pixels of `format` (PNG_FORMAT_GRAY or PNG_FORMAT_RGB).
std::vector<std::uint8_t> read_png_pixels(const std::string& path, std::uint32_t format, std::uint32_t& width,
                                          std::uint32_t& height) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  EXPECT_NE(png_image_begin_read_from_file(&image, path.c_str()), 0) << image.message;
  image.format = format;
  width = image.width;
  height = image.height;
  std::vector<std::uint8_t> pixels(PNG_IMAGE_SIZE(image));
  EXPECT_NE(png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr), 0) << image.message;
  return pixels;
}

TEST(PngFile, GrayAndColorImagesReadBackAsWritten) {
  const std::string dir = "/tmp/hpctrain-png-test-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::vector<std::uint8_t> gray{0, 64, 128, 255, 1, 2};  // 3 wide, 2 high
  write_png(dir + "/gray.png", gray, 3, 2, 1);
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  EXPECT_EQ(read_png_pixels(dir + "/gray.png", PNG_FORMAT_GRAY, width, height), gray);
  EXPECT_EQ(width, 3u);
  EXPECT_EQ(height, 2u);
  std::vector<std::uint8_t> rgb(2 * 2 * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>(i * 20);
  write_png(dir + "/rgb.png", rgb, 2, 2, 3);
  EXPECT_EQ(read_png_pixels(dir + "/rgb.png", PNG_FORMAT_RGB, width, height), rgb);
  ::unlink((dir + "/gray.png").c_str());
  ::unlink((dir + "/rgb.png").c_str());
  ::rmdir(dir.c_str());
}

TEST(PngFile, AnUnwritablePathIsAnErrorNamingIt) {
  try {
    write_png("/nonexistent-dir/x.png", std::vector<std::uint8_t>(4), 2, 2, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write /nonexistent-dir/x.png"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hpctrain::io
