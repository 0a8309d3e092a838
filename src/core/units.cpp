#include "hpctrain/core/units.h"

#include <cmath>
#include <cstdio>
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

std::string bytes_text(std::int64_t bytes) {
  const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < sizeof(units) / sizeof(units[0])) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(text, sizeof(text), value >= 100 ? "%.0f %s" : value >= 10 ? "%.1f %s" : "%.2f %s", value,
                  units[unit]);
  }
  return text;
}

}  // namespace hpctrain
