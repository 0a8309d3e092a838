#!/usr/bin/env bash
# ctest `jobs_profile_summary`: jobs/bench/profile_summary.py on a small trace whose figures are
# known by hand (two steps: three kernels and a copy, one overlap, one 20 us gap and one 5 us gap
# per step); exit 141 and no traceback when its reader has gone; and one error line, exit 2, for a
# trace without GPU work.
#   tests/jobs/profile_summary_test.sh SOURCE_DIR
set -uo pipefail
source_dir=$(realpath "${1:?usage: profile_summary_test.sh SOURCE_DIR}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cat > "$work/trace.json" <<'JSON'
{"traceEvents": [
 {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "ts": 0, "dur": 100},
 {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4>", "ts": 90, "dur": 20},
 {"ph": "X", "cat": "kernel", "name": "multi_tensor_apply_kernel FusedAdamMathFunctor", "ts": 130, "dur": 30},
 {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 165, "dur": 5},
 {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "ts": 1000, "dur": 100},
 {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4>", "ts": 1090, "dur": 20},
 {"ph": "X", "cat": "kernel", "name": "multi_tensor_apply_kernel FusedAdamMathFunctor", "ts": 1130, "dur": 30},
 {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 1165, "dur": 5},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 4},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 10, "dur": 150},
 {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 10}
]}
JSON
python3 "$source_dir/jobs/bench/profile_summary.py" "$work/trace.json" --steps 2 --json > "$work/out.json" ||
  fail "profile_summary.py failed: $(cat "$work/out.json")"
python3 - "$work/out.json" <<'PY' || fail "wrong figures: $(cat "$work/out.json")"
import json, sys
s = json.load(open(sys.argv[1]))
near = lambda a, b: abs(a - b) < 1e-9
# Per step: busy 110 + 30 + 5 = 145 us; one 20 us gap (110..130), one 5 us gap (160..165); the
# 830 us between the steps is idle too (span 1170 us over 2 steps).
assert near(s["gpu_busy_ms"], 0.145), s
assert near(s["gpu_span_ms"], 0.585), s
assert near(s["gaps_over_10us_per_step"], 1.5), s  # 20 us twice, and 830 us once
assert near(s["kernel_ms_by_kind"]["matrix products"], 0.1), s
assert near(s["kernel_ms_by_kind"]["optimizer"], 0.03), s
assert near(s["kernel_ms_by_kind"]["element-wise"], 0.02), s
assert near(s["kernel_ms_by_kind"]["copies and fills"], 0.005), s
assert near(s["kernels_per_step"], 3), s
assert near(s["launches_per_step"], 0.5) and near(s["host_wait_ms"], 0.075), s
PY
# To a file, not a pipe: `grep -q` may close the pipe while the table is still being printed.
python3 "$source_dir/jobs/bench/profile_summary.py" "$work/trace.json" --steps 2 > "$work/table.txt" ||
  fail "profile_summary.py failed on the table: $(cat "$work/table.txt")"
grep -q "GPU time by kind" "$work/table.txt" || fail "the table has no 'GPU time by kind': $(cat "$work/table.txt")"
# A reader that is gone (`| head` done) ends the report quietly with 141, as a killed pipe would.
python3 - "$source_dir/jobs/bench/profile_summary.py" "$work/trace.json" > "$work/closed.txt" 2>&1 <<'PY' ||
import os, subprocess, sys
read_end, write_end = os.pipe()
os.close(read_end)
done = subprocess.run([sys.executable, sys.argv[1], sys.argv[2]], stdout=write_end, stderr=subprocess.PIPE)
assert done.returncode == 141 and not done.stderr, (done.returncode, done.stderr)
PY
  fail "a closed pipe: $(cat "$work/closed.txt")"
echo '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 10}]}' > "$work/cpu.json"
python3 "$source_dir/jobs/bench/profile_summary.py" "$work/cpu.json" > "$work/out.txt" 2>&1
status=$?
[ "$status" -eq 2 ] || fail "a trace without GPU work exited $status, not 2"
[ "$(grep -c '^profile_summary: error:' "$work/out.txt")" -eq 1 ] || fail "expected one error line: $(cat "$work/out.txt")"
echo "profile_summary_test: busy time, gaps, kinds, launches and waits as counted by hand; a closed pipe is exit 141;" \
  "a CPU trace is one error line, exit 2"
