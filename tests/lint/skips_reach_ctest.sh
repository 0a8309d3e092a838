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

# Read from CTest's own files: running ctest here would rewrite the LastTest.log of the run this
# test is part of, where jobs/test.sh finds the skips' reasons.
regex=$(/usr/bin/python3 - "$build/tests" <<'PY'
import glob, re, sys
files = [sys.argv[1] + "/CTestTestfile.cmake"] + glob.glob(sys.argv[1] + "/*_tests.cmake")
text = "".join(open(f).read() for f in files)
name = r"\[(=+)\[(.+?)\]\1\]"
binaries = ("hpctrain_e2e_tests", "hpctrain_mpi_tests", "hpctrain_unit_tests", "hpctrain_cli_tests")
wanted = {m.group(2) for m in re.finditer(r"add_test\(\s*" + name + r"([^\n]*)", text)
          if any(b in m.group(3) for b in binaries)}
regexes, covered = set(), set()
for m in re.finditer(r"set_tests_properties\(\s*" + name + r"\s+PROPERTIES([^\n]*)", text):
    skip = re.search(r'SKIP_REGULAR_EXPRESSION (?:"([^"]*)"|\[(=+)\[(.*?)\]\2\])', m.group(3))
    if skip:
        covered.add(m.group(2))
        regexes.add(skip.group(1) if skip.group(1) is not None else skip.group(3))
missing = sorted(wanted - covered)
if not wanted or missing:
    sys.exit("no SKIP_REGULAR_EXPRESSION: " + (", ".join(missing[:10]) or "no GoogleTest entries found"))
print("\n".join(sorted(regexes)))
PY
) || fail "$regex"

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
