#!/usr/bin/env bash
# ctest `build_tensorboard_clash` (label build): TensorBoard's event files in the build GPU users
# have. A CUDA libtorch from pytorch.org or pip carries protobuf headers of another version among
# its include directories; code that the system's protoc generates does not compile against them.
# This configures the project with a stand-in for them put before libtorch's include directories
# (HPCTRAIN_TORCH_EXTRA_INCLUDE_DIRS: every header of the system's protobuf, each an #error), checks
# that the stand-in bites, builds the TensorBoard writer (src/tensorboard, which never sees
# libtorch's include directories) and a program that writes an event file through it, and reads
# the file with the independent reader (tests/support/read_tfevents.py).
#   tests/clash/tensorboard_clash_test.sh SOURCE_DIR BUILD_DIR PROTOBUF_INCLUDE_DIR
set -uo pipefail
source_dir=$(realpath "${1:?usage: tensorboard_clash_test.sh SOURCE_DIR BUILD_DIR PROTOBUF_INCLUDE_DIR}")
build=${2:?usage: tensorboard_clash_test.sh SOURCE_DIR BUILD_DIR PROTOBUF_INCLUDE_DIR}
protobuf_include=${3:?usage: tensorboard_clash_test.sh SOURCE_DIR BUILD_DIR PROTOBUF_INCLUDE_DIR}
fail() { echo "FAIL: $*" >&2; exit 1; }

standin="$build/torch-include"
rm -rf "$standin"
(cd "$protobuf_include" && find google/protobuf -name '*.h' -o -name '*.inc') | while read -r header; do
  mkdir -p "$standin/$(dirname "$header")"
  echo "#error \"$header from libtorch's include directory (a stand-in for a pip libtorch's own protobuf)\"" \
    > "$standin/$header"
done
[ -f "$standin/google/protobuf/message_lite.h" ] || fail "no protobuf headers under $protobuf_include"
# The stand-in bites: a source that sees libtorch's include directories cannot include protobuf.
echo '#include <google/protobuf/message_lite.h>' | c++ -isystem "$standin" -x c++ -fsyntax-only - 2>/dev/null &&
  fail "the stand-in headers did not stop a compile"

cmake -S "$source_dir" -B "$build" -DCMAKE_BUILD_TYPE=Release -DHPCTRAIN_PCH=OFF -DHPCTRAIN_BUILD_TESTS=ON \
  -DHPCTRAIN_WERROR="${HPCTRAIN_WERROR:-OFF}" -DHPCTRAIN_TORCH_EXTRA_INCLUDE_DIRS="$standin" > "$build.configure.log" 2>&1 ||
  fail "configure: $(tail -n 20 "$build.configure.log")"
grep -q "TensorBoard event files: ON" "$build.configure.log" || fail "configure left TensorBoard out: $(grep TensorBoard "$build.configure.log")"
cmake --build "$build" --target tensorboard_event_check -j 2 > "$build.build.log" 2>&1 ||
  fail "build: $(grep -m 5 -B 2 -A 3 'error' "$build.build.log")"

# The stand-in sits where libtorch's include directories are, and the writer's module never sees them.
grep -q -- "$standin" "$build/src/CMakeFiles/hpctrain_train.dir/flags.make" ||
  fail "the stand-in is not among libtorch's include directories"
grep -q -- "$standin" "$build/src/CMakeFiles/hpctrain_tensorboard.dir/flags.make" &&
  fail "the TensorBoard module sees libtorch's include directories"

events="$build/events"
rm -rf "$events"
"$build/tests/tensorboard_event_check" "$events" || fail "tensorboard_event_check exited $?"
out=$(/usr/bin/python3 "$source_dir/tests/support/read_tfevents.py" "$events"/events.out.tfevents.*) ||
  fail "the event file does not read: $out"
/usr/bin/python3 - "$out" <<'PY' || fail "the events read back are not the ones written: $out"
import json, sys
events = json.loads(sys.argv[1])[0]
assert events[0]["file_version"] == "brain.Event:2", events[0]
assert "config" in events[1]["texts"], events[1]
scalars = {(e["step"], tag): value for e in events[2:] for tag, value in e.get("scalars", {}).items()}
assert scalars == {(1, "loss"): 2.5, (2, "loss"): 1.25, (2, "lr"): 0.5}, scalars
PY
echo "tensorboard_clash_test: with protobuf headers of another version before libtorch's, the build writes event files that read back"
