#!/usr/bin/env bash
# ctest `lint_skips_reach_ctest` (label lint): a GoogleTest test that skips itself is a skip in
# CTest's count, not a pass. Every CTest entry that runs several GoogleTest tests in one process
# (the e2e suites, the MPI binary) carries SKIP_REGULAR_EXPRESSION, and every discovered one
# (unit, cli) too; and the main() those entries use prints the line that expression matches when a
# test skipped and none failed, and nothing of the kind when one failed (tests/support/skip_report.h).
#   tests/lint/skips_reach_ctest.sh BUILD_DIR SKIP_REPORT_CHECK_BINARY
set -uo pipefail
build=${1:?usage: skips_reach_ctest.sh BUILD_DIR SKIP_REPORT_CHECK_BINARY}
check=${2:?usage: skips_reach_ctest.sh BUILD_DIR SKIP_REPORT_CHECK_BINARY}
fail() { echo "FAIL: $*" >&2; exit 1; }

regex=$(ctest --test-dir "$build" --show-only=json-v1 | /usr/bin/python3 -c '
import json, sys
tests = json.load(sys.stdin)["tests"]
regexes, missing = set(), []
for t in tests:
    command = " ".join(t.get("command", []))
    if not any(b in command for b in ("hpctrain_e2e_tests", "hpctrain_mpi_tests", "hpctrain_unit_tests",
                                      "hpctrain_cli_tests")):
        continue
    skip = [p["value"] for p in t.get("properties", []) if p["name"] == "SKIP_REGULAR_EXPRESSION"]
    if not skip:
        missing.append(t["name"])
    else:
        regexes.update(v for value in skip for v in (value if isinstance(value, list) else [value]))
if missing:
    sys.exit("no SKIP_REGULAR_EXPRESSION: " + ", ".join(missing[:10]))
print("\n".join(sorted(regexes)))') || fail "$regex"

out=$("$check" 2>&1) || fail "a run with a skip and no failure exited $?: $out"
line=$(grep -m 1 '^SKIP: SkipReport.Skips did not run here: ' <<< "$out") || fail "no SKIP line: $out"
matched=0
while IFS= read -r expression; do
  grep -qE -- "$expression" <<< "$line" && matched=1
done <<< "$regex"
[ "$matched" -eq 1 ] || fail "no entry's SKIP_REGULAR_EXPRESSION ($regex) matches '$line'"
grep -q "SKIP: SkipReport.Passes" <<< "$out" && fail "a test that passed was reported as skipped: $out"

status=0
out=$("$check" --gtest_also_run_disabled_tests 2>&1) || status=$?
[ "$status" -ne 0 ] || fail "a run with a failure exited 0"
grep -q '^SKIP: ' <<< "$out" && fail "a run with a failure printed a SKIP line, which would hide it: $out"
echo "skips_reach_ctest: every GoogleTest entry carries its skip expression; a skip is reported," \
     "a failure is not hidden"
