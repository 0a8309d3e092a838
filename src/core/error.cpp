#include "hpctrain/core/error.h"

#include <cstring>

namespace hpctrain {

std::string source_location(const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return std::string(base ? base + 1 : file) + ":" + std::to_string(line);
}

}  // namespace hpctrain
