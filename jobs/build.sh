#!/usr/bin/env bash
# Configures and builds hpctrain with a CMake preset (default: release) into build/<preset>.
# Reuses the build directory, so a second run only rebuilds what changed: jobs/quickstart.sh and
# jobs/test.sh share build/release. HPCTRAIN_WERROR=ON in the environment makes warnings in
# hpctrain's own code errors (CI sets it; so does the dev preset).
#   jobs/build.sh [release|dev|asan]   (asan: clang, sanitizers and the libFuzzer targets)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
cache_args=()
if [ -n "${HPCTRAIN_WERROR:-}" ]; then cache_args+=("-DHPCTRAIN_WERROR=$HPCTRAIN_WERROR"); fi
cmake --preset "$preset" "${cache_args[@]}" >/dev/null
cmake --build --preset "$preset"
echo "build: build/$preset/src/hpctrain"
