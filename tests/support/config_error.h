// For unit tests of one-line configuration errors.
#pragma once

#include <functional>
#include <string>

#include "hpctrain/core/error.h"

namespace hpctrain::testing {

// Runs `body` and returns the ConfigError's message, or "" when nothing was thrown.
inline std::string config_error(const std::function<void()>& body) {
  try {
    body();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace hpctrain::testing
