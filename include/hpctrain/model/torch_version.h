// HT_TORCH_AT_LEAST(major, minor): whether the libtorch compiled against is that version or later,
// for the APIs that moved between libtorch 1.13 and 2.x. Depends on torch/version.h.
#pragma once

#include <torch/version.h>

#define HT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
