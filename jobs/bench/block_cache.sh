#!/usr/bin/env bash
# The block cache (docs/architecture.md, "Allocator") against malloc alone, in one run:
#   jobs/bench/block_cache.sh [--pairs 5] [--np 2] [--stage 1] [--bin PATH] [--out DIR]
# Trains fashion_cnn (configs/fashion_cnn.ini, batch 64 per rank, 400 steps, as compare.sh's ZeRO
# row) at dist.zero_stage=--stage, with the cache and with HPCTRAIN_BLOCK_CACHE=0, alternating
# which goes first, --pairs times. Prints rank 0's peak RSS (peak_rss_mb) and samples/s (the mean
# after the first record) per run, then the medians and their ratios (cache / malloc).
set -euo pipefail
cd "$(dirname "$0")/../.."

pairs=5
np=2
stage=1
bin=build/release/src/hpctrain
out=build/bench-block-cache
source jobs/bench/lib.sh
bench_options "$0" "pairs np stage bin out" "$@"
bench_need_binary "$0" "$bin"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mkdir -p "$out"
bench_fashion_mnist "$bin" "$out/fashion-mnist"
results="$out/results.tsv"
: > "$results"

# run CACHE(1|0): one training run; appends "cache peak_rss_mb samples_per_s" to $results.
run() {
  rm -rf "$out/run"
  HPCTRAIN_BLOCK_CACHE=$1 mpirun --oversubscribe -np "$np" "$bin" train --config configs/fashion_cnn.ini \
    --run.dir="$out/run" --data.path="$out/fashion-mnist" --data.eval_split= --train.threads=1 \
    --train.batch_size=64 --train.max_steps=400 --log.every_steps=100 --dist.zero_stage="$stage" \
    > "$out/last.log" 2>&1 || { tail -n 5 "$out/last.log" >&2; exit 1; }
  /usr/bin/python3 -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
r = [x for x in r if "samples_per_s" in x][1:]
print(sys.argv[2], r[-1]["peak_rss_mb"], sum(x["samples_per_s"] for x in r) / len(r))' \
    "$out/run/metrics.jsonl" "$1" | tee -a "$results"
}

echo "# block_cache.sh: fashion_cnn, $np ranks, batch 64, dist.zero_stage=$stage; cache peak_rss_mb samples_per_s"
for ((p = 0; p < pairs; p++)); do
  if [ $((p % 2)) -eq 0 ]; then run 1; run 0; else run 0; run 1; fi
done
/usr/bin/python3 - "$results" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
med = {c: [statistics.median(float(r[i]) for r in rows if r[0] == c) for i in (1, 2)] for c in ("1", "0")}
print(f"median peak RSS MiB: cache {med['1'][0]:.1f}, malloc {med['0'][0]:.1f}, ratio {med['1'][0] / med['0'][0]:.3f}")
print(f"median samples/s:    cache {med['1'][1]:.0f}, malloc {med['0'][1]:.0f}, ratio {med['1'][1] / med['0'][1]:.3f}")
EOF
