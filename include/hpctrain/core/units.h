// Sizes with units, as users write them: "1048576", "64KiB", "64MiB", "2GiB", "1.5GB".
// Depends on std only.
#pragma once

#include <cstdint>
#include <string>

namespace hpctrain {

// Bytes in `text`; B/KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024, no unit means bytes.
// Throws ConfigError naming `what` (e.g. "--shard-size") when the text is not a size >= 1 byte.
std::int64_t parse_bytes(const std::string& text, const std::string& what);

// `bytes` for a log line, in the largest binary unit that keeps it at least 1: "512 B", "2.2 KiB",
// "85.0 MiB", "1.27 GiB" (three significant digits).
std::string bytes_text(std::int64_t bytes);

}  // namespace hpctrain
