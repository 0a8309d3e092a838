#!/usr/bin/env bash
# Runs one libFuzzer target of the asan build (jobs/build.sh asan) for a while, starting from its
# seed corpus tests/fuzz/corpus/<target>. New inputs go to build/asan/fuzz/<target>/corpus, a
# crashing one to build/asan/fuzz/<target>/crash-*: copy it into tests/fuzz/regressions/<target>/
# once fixed, and CTest replays it in every build (docs/reliability.md).
#   jobs/fuzz.sh TARGET [--minutes N] [--jobs J]   TARGET: config | manifest | shard | checkpoint | importer
#                                                  | layout | weights | tokenizer | tensorboard | timeline | flight
#   jobs/fuzz.sh TARGET --reseed                    rewrite the seeds the target's write_seeds makes
#                                                   (other files of the corpus, such as the
#                                                   original-format fixtures, are kept)
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "fuzz.sh: $*" >&2; exit 2; }
target="${1:-}"
case "$target" in config|manifest|shard|checkpoint|importer|layout|weights|tokenizer|tensorboard|timeline|flight) ;; *) die "TARGET must be config, manifest, shard, checkpoint, importer, layout, weights, tokenizer, tensorboard, timeline or flight" ;; esac
shift
minutes=10
jobs=1
reseed=0
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes="${2:?--minutes needs a number}"; shift 2 ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift 2 ;;
    --reseed) reseed=1; shift ;;
    *) die "unknown argument '$1'" ;;
  esac
done
[[ "$minutes" =~ ^[1-9][0-9]*$ ]] || die "--minutes must be a positive whole number, not '$minutes'"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive whole number, not '$jobs'"

seeds="tests/fuzz/corpus/$target"
if [ "$reseed" = 1 ]; then
  replay="build/asan/tests/fuzz_replay_$target"
  [ -x "$replay" ] || die "$replay not built: run jobs/build.sh asan"
  fresh=$(mktemp -d)
  "$replay" --write-seeds "$fresh"
  mkdir -p "$seeds"
  cp "$fresh"/* "$seeds"/
  rm -rf "$fresh"
  ls -l "$seeds"
  exit 0
fi
bin="build/asan/tests/fuzz_$target"
[ -x "$bin" ] || die "$bin not built: run jobs/build.sh asan"

out="build/asan/fuzz/$target"
mkdir -p "$out/corpus"
supp="$PWD/tests/sanitizers"
# A corrupted HDF5 file can make the library allocate what a damaged size field says (8 GiB seen):
# untouched, that costs address space only, as it would outside the fuzzer. So malloc may return
# null as it does in production and single allocations are not limited; the memory actually used
# still is (-rss_limit_mb).
export ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:allocator_may_return_null=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"

dict=()
if [ "$target" = config ]; then
  # The option names and sections, from the generated reference, so the fuzzer writes keys that exist.
  grep -oE '^\| `[a-z_]+\.[a-z_0-9]+`' docs/configuration.md | sed -E 's/^\| `([a-z_]+)\.([a-z_0-9]+)`/"[\1]"\n"\2 = "/' \
    | sort -u > "$out/options.dict" || true
  [ -s "$out/options.dict" ] || die "no options found in docs/configuration.md for the dictionary"
  dict=(-dict="$PWD/$out/options.dict")
elif [ -f "tests/fuzz/$target.dict" ]; then
  dict=(-dict="$PWD/tests/fuzz/$target.dict")
fi

parallel=()
# Several jobs run as separate processes, each logging to $out/fuzz-<n>.log.
[ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")

echo "fuzz.sh: $target for $minutes minute(s), $jobs job(s); findings in $out"
cd "$out"
"$OLDPWD/$bin" -max_total_time=$((minutes * 60)) -print_final_stats=1 -timeout=30 -rss_limit_mb=4096 -malloc_limit_mb=1048576 \
  "${parallel[@]}" -artifact_prefix="$PWD/" "${dict[@]}" corpus "$OLDPWD/$seeds"
