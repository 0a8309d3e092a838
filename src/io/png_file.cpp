#include "hpctrain/io/png_file.h"

#include <png.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "hpctrain/core/error.h"

namespace hpctrain::io {
namespace {

int color_type(std::int64_t channels) {
  switch (channels) {
    case 1: return PNG_COLOR_TYPE_GRAY;
    case 3: return PNG_COLOR_TYPE_RGB;
    case 4: return PNG_COLOR_TYPE_RGBA;
    default: throw Error("internal: a PNG image has 1, 3 or 4 channels, not " + std::to_string(channels));
  }
}

// libpng reports errors by longjmp; this turns one into an exception at the call that failed.
[[noreturn]] void on_png_error(png_structp png, png_const_charp message) {
  *static_cast<std::string*>(png_get_error_ptr(png)) = message;
  png_longjmp(png, 1);
}

// The calls that can fail, apart, so that nothing with a destructor lives in the frame longjmp
// returns to. False: libpng failed (its message is in the error pointer).
bool write_image(png_structp png, png_infop info, FILE* file, png_const_bytep* rows, std::int64_t width,
                 std::int64_t height, int type) {
  if (setjmp(png_jmpbuf(png)) != 0) return false;
  png_init_io(png, file);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8, type,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_rows(png, const_cast<png_bytepp>(rows), static_cast<png_uint_32>(height));
  png_write_end(png, nullptr);
  return true;
}

}  // namespace

void write_png(const std::string& path, const std::vector<std::uint8_t>& pixels, std::int64_t width,
               std::int64_t height, std::int64_t channels) {
  HT_CHECK(width > 0 && height > 0 && static_cast<std::int64_t>(pixels.size()) == width * height * channels,
           "PNG pixels must be height x width x channels bytes");
  const int type = color_type(channels);
  const std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) throw Error("cannot write " + path + ": " + std::strerror(errno));
  std::string failure;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &failure, on_png_error, nullptr);
  png_infop info = png != nullptr ? png_create_info_struct(png) : nullptr;
  if (png == nullptr || info == nullptr) {
    png_destroy_write_struct(&png, &info);
    throw Error("cannot write " + path + ": libpng could not start");
  }
  std::vector<png_const_bytep> rows(static_cast<std::size_t>(height));
  const auto row_bytes = static_cast<std::size_t>(width * channels);
  for (std::size_t y = 0; y < rows.size(); ++y) rows[y] = pixels.data() + y * row_bytes;
  const bool written = write_image(png, info, file.get(), rows.data(), width, height, type);
  png_destroy_write_struct(&png, &info);
  if (!written) throw Error("cannot write " + path + ": " + failure);
  if (std::fflush(file.get()) != 0) throw Error("cannot write " + path + ": " + std::strerror(errno));
}

}  // namespace hpctrain::io
