#!/usr/bin/env bash
# Builds the asan preset (clang, AddressSanitizer + UndefinedBehaviorSanitizer) and runs the unit,
# MPI and fuzz-replay tests under it; ends with one line "N passed, N failed". Run before each
# release (docs/reliability.md): the instrumented build takes longer than CI allows.
# Suppressions (tests/sanitizers/) cover third-party code only, each with its reason.
#   jobs/sanitize.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source jobs/env.sh

bash jobs/install-deps.sh --sanitizers || exit 1
bash jobs/build.sh asan || exit 1

supp="$PWD/tests/sanitizers"
# Open MPI, HDF5 and libtorch are not instrumented: ASan sees their allocations through malloc,
# and their leaks at exit are theirs (lsan.supp). A damaged HDF5 file can make HDF5 ask for
# absurd sizes (tests/fuzz/regressions): malloc then returns null, as it does in production.
# Any UBSan report fails the test (halt_on_error).
asan="halt_on_error=1:detect_leaks=1:allocator_may_return_null=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"

log=$(mktemp)
status=0
# Two passes: Open MPI's leaks are matched by the libraries deep in their stacks, which only the
# slow unwinder reaches (lsan.supp); it would slow the libtorch-heavy unit tests several-fold.
ASAN_OPTIONS="$asan" ctest --test-dir build/asan --output-on-failure -L 'unit|fuzz' 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
ASAN_OPTIONS="$asan:fast_unwind_on_malloc=0" ctest --test-dir build/asan --output-on-failure -L mpi 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
summaries=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$log")
rm -f "$log"
if [ "$(echo "$summaries" | grep -c .)" != 2 ]; then
  echo "0 passed, 1 failed"
  exit 1
fi
read -r failed total < <(echo "$summaries" | sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1 \2/' |
                         awk '{ f += $1; t += $2 } END { print f, t }')
echo "$((total - failed)) passed, $failed failed"
exit "$status"
