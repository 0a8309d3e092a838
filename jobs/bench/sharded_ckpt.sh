#!/usr/bin/env bash
# A checkpoint written in slices by every rank (dist.zero_stage=2) against `dd conv=fsync` of as
# many bytes, alternately:
#   jobs/bench/sharded_ckpt.sh [--pairs 5] [--np 4] [--stage 2] [--async false] [--bin PATH] [--out DIR]
# Each pair: one training step of the gpt of configs/text_gpt.ini made 8 blocks x 512 wide (a
# 305 MB checkpoint with AdamW's state), at --np ranks and dist.zero_stage --stage, timed as
# hpctrain logs it (start, every rank's slices, fsync and rename); then dd of the file's size to a
# new file in the same directory, after a `sync`. Prints each pair and the medians in MB/s. With
# --async true (ckpt.async) the write runs in the background, and the medians add how long
# training waited for it (rank 0's host copy of its part, as hpctrain logs it).
set -euo pipefail
cd "$(dirname "$0")/../.."

pairs=5
np=4
stage=2
async=false
bin=build/release/src/hpctrain
out=build/sharded-ckpt
source jobs/bench/lib.sh
bench_options "$0" "pairs np stage async bin out" "$@"
bench_need_binary "$0" "$bin"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mkdir -p "$out"
[ -f "$out/text/manifest.json" ] ||
  "$bin" prepare text --source /usr/share/common-licenses --out "$out/text" > /dev/null 2>&1
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((p = 1; p <= pairs; p++)); do
  rm -rf "$out/run"
  sync
  mpirun --oversubscribe -np "$np" "$bin" train --config configs/text_gpt.ini --data.path="$out/text" \
    --run.dir="$out/run" --train.threads=1 --train.max_steps=1 --train.batch_size=2 --data.eval_split= \
    --model.gpt_embd=512 --model.gpt_layers=8 --dist.zero_stage="$stage" --ckpt.async="$async" > "$out/last.log" 2>&1 ||
    { tail -n 5 "$out/last.log" >&2; exit 1; }
  bytes=$(stat -c %s "$out"/run/checkpoints/ckpt-1.h5)
  seconds=$(sed -n 's/.*checkpoint .* written in \(the background in \)\{0,1\}\([0-9.]*\) s .*/\2/p' "$out/last.log")
  waited=$(sed -n 's/.*training waited \([0-9.]*\) s.*/\1/p' "$out/last.log")
  rm -f "$out/dd.bin"
  sync
  read -r dd_bytes dd_seconds < <(LC_ALL=C dd if=/dev/zero of="$out/dd.bin" bs=1M count=$(((bytes + 1048575) / 1048576)) \
    conv=fsync 2>&1 | awk '/copied/ { print $1, $(NF-3) }')
  rm -f "$out/dd.bin"
  echo "$bytes $seconds $dd_bytes $dd_seconds ${waited:--1}" >> "$results"
  awk -v p="$p" '{ printf "pair %d: hpctrain %.0f MB/s, dd %.0f MB/s\n", p, $1 / $2 / 1e6, $3 / $4 / 1e6 }' <(tail -n 1 "$results") >&2
done
rm -rf "$out/run"
awk -v np="$np" -v stage="$stage" '
  { h[NR] = $1 / $2 / 1e6; d[NR] = $3 / $4 / 1e6; r[NR] = h[NR] / d[NR]; w[NR] = $5; size = $1 }
  function median(a, n,   i, j, t, v) {
    for (i = 1; i <= n; i++) v[i] = a[i]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  END {
    printf "# %.0f MB checkpoint, %d ranks, dist.zero_stage=%d; medians of %d alternating pairs\n", size / 1e6, np, stage, NR
    printf "hpctrain %.0f MB/s, dd %.0f MB/s, ratio of the pairs %.2f\n", median(h, NR), median(d, NR), median(r, NR)
    if (w[1] >= 0) printf "training waited %.3f s for the background write\n", median(w, NR)
  }' "$results"
