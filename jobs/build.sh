#!/usr/bin/env bash
# Configures and builds hpctrain with a CMake preset (default: release) into build/<preset>.
# Reuses the build directory, so a second run only rebuilds what changed.
#   jobs/build.sh [dev|release|asan]   (asan: clang, sanitizers and the libFuzzer targets)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
echo "build: build/$preset/src/hpctrain"
