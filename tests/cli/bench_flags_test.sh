#!/usr/bin/env bash
# ctest `cli_bench_flags` (label cli): every `hpctrain bench` mode with every flag its usage
# documents, at sizes that take a second: each run succeeds, or (a GPU, Kineto) fails on that flag,
# which shows the flag was read; every flag of another mode is refused in one line naming it; and
# the flags the usage texts document are exactly the ones tried here.
#   tests/cli/bench_flags_test.sh HPCTRAIN_BINARY
set -uo pipefail
bin=$(realpath "${1:?usage: bench_flags_test.sh HPCTRAIN_BINARY}")
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$bin" prepare fashion-mnist --source /usr/share/datasets/fashion-mnist --out "$work/data" --limit 300 \
  > /dev/null 2>&1 || fail "prepare fashion-mnist"
tiny_gpt="--model gpt --layers 1 --heads 2 --embd 8 --block-size 8 --vocab 16 --batch-size 2 --steps 1"
tiny_cnn="--model fashion_cnn --batch-size 2 --steps 1"
tiny_llama="--model llama --hf-config $(dirname "$0")/../../configs/models/tiny-llama --block-size 8 --batch-size 2 --steps 1"

# mode | its selector and every flag it documents, with values | what it must print (exit 0), or
# "error: TEXT" for a flag that needs what this machine lacks.
cases=(
  "data|--data $work/data --split train --batch-size 16 --repeats 1 --prefetch 2 --cache-mb 64 --shuffle-window-mb 1 --cold --data-io posix|loader"
  "data --io|--data $work/data --io --split train --repeats 1 --cache-mb 64 --cold|mpio"
  "comm|--backend mpi --min-bytes 4KiB --max-bytes 8KiB --iters 2 --rounds 1 --check-collectives false|unchecked"
  "step|$tiny_gpt --bucket-mb 1 --device cpu --precision bf16 --tf32 true --check-collectives false|step, overlap on"
  "step|$tiny_llama --precision fp32|step, overlap on"
  "step --zero-stage|$tiny_gpt --zero-stage 1 --optimizer sgd --bucket-mb 1 --device cpu --precision fp32 --check-collectives true|optimizer step ms"
  "step --zero-stage|$tiny_llama --zero-stage 3|optimizer step ms"
  "step --update|$tiny_gpt --update --bucket-mb 1 --device cpu --precision fp32 --tf32 false --check-collectives true|multi-tensor / per tensor speed"
  "step --update|$tiny_llama --update --precision bf16|multi-tensor / per tensor speed"
  "step --update|$tiny_cnn --update --device cuda|error: bench step --device cuda: libtorch sees no GPU"
  "step --update|$tiny_cnn --update --cuda-graphs|error: bench step --cuda-graphs needs --device cuda"
  "step --update|$tiny_cnn --update --profile $work/profile.json|"
)

documented() {  # WHAT: the flags bench WHAT's usage names
  "$bin" bench "$1" --help | grep -o -- '--[a-z][a-z0-9-]*' | grep -vx -- '--help' | sort -u
}
tried() {  # WHAT [MODE]: the flags the cases give bench WHAT (in MODE alone, if given)
  for c in "${cases[@]}"; do
    [ "${c%% *}" = "$1" ] || [ "${c%%|*}" = "$1" ] || continue
    IFS='|' read -r mode args _ <<< "$c"
    [ -z "${2:-}" ] || [ "$mode" = "$2" ] || continue
    grep -o -- '--[a-z][a-z0-9-]*' <<< "$args"
  done | sort -u
}
for what in data comm step; do
  diff <(documented "$what") <(tried "$what") > "$work/diff" ||
    fail "bench $what: documented (<) and tried (>) flags differ: $(cat "$work/diff")"
done

for c in "${cases[@]}"; do
  IFS='|' read -r mode args expected <<< "$c"
  what=${mode%% *}
  status=0
  # shellcheck disable=SC2086
  out=$("$bin" bench "$what" $args 2>&1) || status=$?
  if [ -z "$expected" ]; then  # --profile: a trace where libtorch has Kineto, else its one-line refusal
    [ "$status" -eq 0 ] && [ -s "$work/profile.json" ] && continue
    grep -q "bench step --profile $work/profile.json: .*Kineto" <<< "$out" || fail "$mode $args: $out"
  elif [ "${expected#error: }" != "$expected" ]; then
    [ "$status" -eq 2 ] && grep -qF -- "${expected#error: }" <<< "$out" || fail "$mode $args exited $status: $out"
  else
    [ "$status" -eq 0 ] && grep -qF -- "$expected" <<< "$out" || fail "$mode $args exited $status: $out"
  fi
done

# Each mode refuses every flag of the other modes of its measurement.
refused=0
seen=" "
for c in "${cases[@]}"; do
  IFS='|' read -r mode args _ <<< "$c"
  [[ "$seen" == *" $mode;"* ]] && continue  # one case a mode
  seen+="$mode; "
  what=${mode%% *}
  selector=$(grep -o -- ' --.*' <<< " ${mode#"$what"}" | tr -d ' ')
  for flag in $(comm -23 <(tried "$what") <(tried "$what" "$mode")); do
    [ "$flag" = "--io" ] || [ "$flag" = "--zero-stage" ] || [ "$flag" = "--update" ] && continue  # selectors
    value=1
    case "$flag" in --cold | --cuda-graphs) value= ;; esac
    status=0
    # shellcheck disable=SC2086
    err=$("$bin" bench "$what" $args $flag $value 2>&1 >/dev/null) || status=$?
    [ "$status" -eq 2 ] && grep -q "hpctrain: error: bench $what${selector:+ $selector} does not use $flag " <<< "$err" ||
      fail "bench $what $args $flag $value exited $status: $err"
    refused=$((refused + 1))
  done
done
[ "$refused" -ge 11 ] || fail "only $refused flags tried where they do not belong"
status=0
err=$("$bin" bench step --zero-stage 1 --update 2>&1) || status=$?
[ "$status" -eq 2 ] && grep -q "are two measurements; give one" <<< "$err" || fail "two selectors: $err"
echo "bench_flags_test: ${#cases[@]} runs with every documented flag; $refused flags of other modes refused"
