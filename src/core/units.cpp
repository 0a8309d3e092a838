#include "hpctrain/core/units.h"

#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

#include "hpctrain/core/error.h"

namespace hpctrain {

std::int64_t parse_bytes(const std::string& text, const std::string& what) {
  static const std::vector<std::pair<std::string, double>> kUnits{
      {"KiB", 1024.0}, {"MiB", 1024.0 * 1024}, {"GiB", 1024.0 * 1024 * 1024},
      {"KB", 1e3},     {"MB", 1e6},            {"GB", 1e9},
      {"B", 1.0},      {"", 1.0}};
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  const std::string unit(end);
  for (const auto& [name, scale] : kUnits) {
    if (unit == name && end != text.c_str() && std::isfinite(number) && number * scale >= 1.0) {
      return static_cast<std::int64_t>(number * scale);
    }
  }
  throw ConfigError(what + ": '" + text + "' is not a size (examples: 1048576, 64KiB, 64MiB, 1GB)");
}

}  // namespace hpctrain
