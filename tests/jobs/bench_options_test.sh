#!/usr/bin/env bash
# ctest `jobs_bench_options` (label jobs): the option parsing the benchmarks share
# (jobs/bench/lib.sh), through jobs/bench/trace_overhead.sh and on its own.
#   tests/jobs/bench_options_test.sh SOURCE_DIR
set -uo pipefail
cd "$(realpath "${1:?usage: bench_options_test.sh SOURCE_DIR}")" || exit 1
fail() { echo "FAIL: $*" >&2; exit 1; }
script=jobs/bench/trace_overhead.sh

out=$(bash "$script" --help) || fail "--help exited $?"
grep -q "What recording a timeline costs" <<< "$out" || fail "--help printed: $out"
grep -q "^#!" <<< "$out" && fail "--help printed the shebang"
expect_error() {  # LINE ARGS...: exit 2 with LINE on stderr
  local line=$1 status=0 err
  shift
  err=$(bash "$script" "$@" 2>&1 >/dev/null) || status=$?
  [ "$status" -eq 2 ] && grep -qF "$line" <<< "$err" || fail "$* exited $status: $err"
}
expect_error "trace_overhead.sh: unknown argument '--pairs' (see --help)" --pairs 3
expect_error "trace_overhead.sh: unknown argument 'five' (see --help)" five
expect_error "trace_overhead.sh: --rounds needs a value (see --help)" --rounds
expect_error "trace_overhead.sh: no hpctrain binary at /nonexistent (jobs/build.sh, or --bin PATH)" --bin /nonexistent

# Values land in their variables, dashes as underscores; the defaults stay where none is given.
# shellcheck disable=SC2030,SC2031
result=$(
  source jobs/bench/lib.sh
  rounds=5 tune_steps=1 out=default
  bench_options "$script" "rounds tune_steps out" --rounds 3 --tune-steps "a b"
  echo "$rounds|$tune_steps|$out"
) || fail "bench_options exited $?"
[ "$result" = "3|a b|default" ] || fail "bench_options set: $result"
echo "bench_options_test: --help, unknown arguments, a missing value, a missing binary, values set"
