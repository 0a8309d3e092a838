#!/usr/bin/env bash
# ctest `jobs_plot`: jobs/plot.sh draws a PNG from a run's metrics.jsonl (with evaluation records
# and model TFLOP/s, without either, and a diffusion run's test loss without accuracy) and refuses a directory without metrics with exit 2 and
# one line.
#   tests/jobs/plot_test.sh SOURCE_DIR
set -uo pipefail
source_dir=$(realpath "${1:?usage: plot_test.sh SOURCE_DIR}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; }

mkdir -p "$work/run" "$work/no-eval" "$work/diffusion" "$work/empty"
for step in 1 2 3 4 5 6; do
  echo "{\"epoch\":1,\"loss\":$(awk "BEGIN{print 2.3/$step}"),\"lr\":0.002,\"model_tflops\":0.0$step,\"samples_per_s\":1800.5,\"step\":$step}"
  [ $((step % 3)) -eq 0 ] && echo "{\"epoch\":1,\"step\":$step,\"test_acc\":0.$((70 + step)),\"test_loss\":0.6}"
done > "$work/run/metrics.jsonl"
grep -v test_acc "$work/run/metrics.jsonl" | sed 's/"model_tflops":[0-9.]*,//' > "$work/no-eval/metrics.jsonl"
grep -q model_tflops "$work/no-eval/metrics.jsonl" && fail "the test's second run should have no model_tflops"
sed 's/"test_acc":[0-9.]*,//' "$work/run/metrics.jsonl" > "$work/diffusion/metrics.jsonl"

bash "$source_dir/jobs/plot.sh" "$work/run" > "$work/out.txt" 2>&1 || fail "plot.sh failed: $(cat "$work/out.txt")"
is_png "$work/run/curves.png" || fail "run/curves.png is not a PNG"
bash "$source_dir/jobs/plot.sh" "$work/no-eval" "$work/other.png" > "$work/out.txt" 2>&1 ||
  fail "plot.sh failed without evaluation records: $(cat "$work/out.txt")"
is_png "$work/other.png" || fail "other.png is not a PNG"
bash "$source_dir/jobs/plot.sh" "$work/diffusion" > "$work/out.txt" 2>&1 ||
  fail "plot.sh failed on test losses without accuracy: $(cat "$work/out.txt")"
is_png "$work/diffusion/curves.png" || fail "diffusion/curves.png is not a PNG"
bash "$source_dir/jobs/plot.sh" "$work/empty" > "$work/out.txt" 2>&1
status=$?
[ "$status" -eq 2 ] || fail "a directory without metrics exited $status, not 2"
[ "$(grep -c '^plot: error:' "$work/out.txt")" -eq 1 ] || fail "expected one 'plot: error:' line: $(cat "$work/out.txt")"
echo "plot_test: PNGs with and without evaluation and model TFLOP/s, and of a diffusion run; a missing metrics.jsonl is one error line, exit 2"
