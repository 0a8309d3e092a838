// PNG images written with libpng: 8-bit grayscale, RGB or RGBA. Depends on std only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::io {

// Writes `pixels` (height rows of width x channels bytes; channels 1, 3 or 4) to `path`. Throws
// Error naming the file when it cannot be written.
void write_png(const std::string& path, const std::vector<std::uint8_t>& pixels, std::int64_t width,
               std::int64_t height, std::int64_t channels);

}  // namespace hpctrain::io
