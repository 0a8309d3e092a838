#!/usr/bin/env bash
# What recording a timeline costs (log.trace_steps, docs/monitoring.md; docs/benchmarks.md):
#   jobs/bench/trace_overhead.sh [--rounds 5] [--steps 60] [--np 2] [--bin PATH] [--out DIR]
# Trains configs/fashion_cnn.ini (batch 32 per rank, small buckets: many spans per step) for
# --steps steps, --rounds times each way, alternating (and which goes first alternating): without
# a timeline, and recording every step. Prints each run's median step_ms (metrics.jsonl, the first record left out) and the median
# of the rounds' ratios, traced / untraced.
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=5
steps=60
np=2
bin=build/release/src/hpctrain
out=build/bench-trace
source jobs/bench/lib.sh
bench_options "$0" "rounds steps np bin out" "$@"
bench_need_binary "$0" "$bin"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mkdir -p "$out"
bench_fashion_mnist "$bin" "$out/fashion"

median_step_ms() { /usr/bin/python3 -c '
import json, statistics, sys
values = [json.loads(l)["step_ms"] for l in open(sys.argv[1]) if "step_ms" in json.loads(l)]
print(statistics.median(values[1:] or values))' "$1"; }

run() {  # RUN_DIR EXTRA...: the run's median step_ms
  local dir=$1
  shift
  rm -rf "$dir"
  mpirun -np "$np" --oversubscribe "$bin" train --config configs/fashion_cnn.ini --data.path="$out/fashion" \
    --run.dir="$dir" --train.threads=1 --train.batch_size=32 --train.max_steps="$steps" --log.every_steps=5 \
    --dist.bucket_mb=0.05 --data.eval_split= --ckpt.save_final=false --log.tensorboard=false "$@" \
    >"$dir.log" 2>&1 || { tail -n 5 "$dir.log" >&2; exit 1; }
  median_step_ms "$dir/metrics.jsonl"
}

echo "# trace_overhead.sh: fashion_cnn, -np $np, batch 32, $steps steps, $rounds rounds, $(git rev-parse --short HEAD)"
ratios=()
for round in $(seq "$rounds"); do
  if [ $((round % 2)) -eq 1 ]; then  # which goes first alternates too
    off=$(run "$out/off")
    on=$(run "$out/on" --log.trace_steps=1-"$steps")
  else
    on=$(run "$out/on" --log.trace_steps=1-"$steps")
    off=$(run "$out/off")
  fi
  spans=$(grep -o '"ph":"X"' "$out/on/trace/rank-0.json" | wc -l)
  ratio=$(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.4f", a / b }')
  ratios+=("$ratio")
  printf 'round %d: off %.2f ms, on %.2f ms (%d spans on rank 0): %sx\n' "$round" "$off" "$on" "$spans" "$ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ r[NR] = $1 } END { printf "median traced / untraced: %.4fx\n", r[int((NR + 1) / 2)] }'
