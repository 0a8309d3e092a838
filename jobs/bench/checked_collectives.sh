#!/usr/bin/env bash
# What dist.check_collectives costs (Note [Checked collectives] in src/comm/mpi_communicator.cpp),
# at -np 2 on this machine, three ways:
#  1. per collective: `hpctrain bench comm` with --check-collectives true and false in turn,
#     --pairs times, 4 KiB to 1 MiB; each run's blocking allreduce less the plain MPI_Allreduce it
#     times in the same rounds, so the difference of the two runs is the check's time;
#  2. per step: the collectives one optimizer step issues (a timeline of step 5: the comm track's
#     spans and the blocking allreduces of the train track) times that cost, against the step's
#     time, for fashion_cnn (configs/fashion_cnn.ini) and text_gpt.ini's gpt at ZeRO stage 3 (a
#     gather per block in forward and backward: the most collectives per step hpctrain issues);
#  3. directly: the same training runs checked and unchecked in turn (noisy here: +-10 % a run).
# docs/benchmarks.md, "Checked collectives".
#   jobs/bench/checked_collectives.sh [--pairs 5] [--steps 40] [--bin build/release/src/hpctrain] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
source jobs/bench/lib.sh
source jobs/env.sh
pairs=5 steps=40 bin=build/release/src/hpctrain out=build/bench-checked
bench_options "$0" "pairs steps bin out" "$@"
bench_need_binary "$0" "$bin"
mkdir -p "$out"
bench_fashion_mnist "$bin" "$out/fashion-mnist" > /dev/null
[ -f "$out/text/manifest.json" ] ||
  "$bin" prepare text --source /usr/share/common-licenses --out "$out/text" > /dev/null

comm_run() {  # CHECKED PAIR: bench comm's table
  mpirun -np 2 "$bin" bench comm --min-bytes 4KiB --max-bytes 1MiB --iters 200 --rounds 5 \
    --check-collectives "$1" 2>/dev/null > "$out/comm-$1-$2.txt"
}
for pair in $(seq "$pairs"); do
  if [ $((pair % 2)) -eq 1 ]; then order="true false"; else order="false true"; fi
  for checked in $order; do comm_run "$checked" "$pair"; done
done
/usr/bin/python3 - "$out" "$pairs" > "$out/per-collective.txt" <<'PY'
import statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
def table(path):  # bytes -> blocking us less MPI_Allreduce us
    rows = {}
    for line in open(path):
        if line.startswith("#") or "|" not in line:
            continue
        cols = line.replace("|", " ").split()
        rows[int(cols[0])] = float(cols[2]) - float(cols[7])
    return rows
added = {}
for p in range(1, pairs + 1):
    on, off = table(f"{out}/comm-true-{p}.txt"), table(f"{out}/comm-false-{p}.txt")
    for size in on:
        added.setdefault(size, []).append(on[size] - off[size])
for size, values in sorted(added.items()):
    print(f"{size} {statistics.median(values):.2f} {min(values):.2f} {max(values):.2f}")
PY
echo "# per collective: bytes, microseconds the check adds (median, min, max of $pairs pairs)"
cat "$out/per-collective.txt"
check_us=$(sort -k2 -g "$out/per-collective.txt" | tail -n 1 | cut -d" " -f2)  # the largest median

train() {  # NAME CHECKED EXTRA...: a run of --steps steps
  local name=$1 checked=$2
  shift 2
  rm -rf "$out/$name"
  mpirun -np 2 "$bin" train --run.dir="$out/$name" --data.eval_split= --train.max_steps="$steps" \
    --log.every_steps=5 --ckpt.save_final=false --log.tensorboard=false --log.trace_steps=5-5 \
    --dist.check_collectives="$checked" "$@" > "$out/$name.log" 2>&1
}
cnn_args=(--config configs/fashion_cnn.ini --data.path="$out/fashion-mnist")
gpt_args=(--config configs/text_gpt.ini --data.path="$out/text" --dist.zero_stage=3)
summary() {  # NAME: collectives in step 5, median step_ms after the first record
  /usr/bin/python3 - "$out/$1" <<'PY'
import json, statistics, sys
run = sys.argv[1]
events = json.load(open(f"{run}/trace/rank-0.json"))["traceEvents"]
threads = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
spans = [e for e in events if e.get("ph") == "X"]
collectives = sum(1 for e in spans if threads.get(e["tid"]) == "comm" or
                  (threads.get(e["tid"]) == "train" and e["name"] == "allreduce"))
ms = [r["step_ms"] for r in map(json.loads, open(f"{run}/metrics.jsonl")) if "step_ms" in r][1:]
print(collectives, f"{statistics.median(ms):.2f}")
PY
}
for case in cnn gpt; do
  declare -n args="${case}_args"
  ratios=()
  for pair in $(seq "$pairs"); do
    if [ $((pair % 2)) -eq 1 ]; then order="true false"; else order="false true"; fi
    for checked in $order; do train "$case-$checked-$pair" "$checked" "${args[@]}"; done
    read -r collectives on_ms < <(summary "$case-true-$pair")
    read -r _ off_ms < <(summary "$case-false-$pair")
    ratios+=("$(awk -v a="$on_ms" -v b="$off_ms" 'BEGIN { printf "%.3f", a / b }')")
  done
  awk -v c="$collectives" -v us="$check_us" -v ms="$off_ms" -v name="$case" 'BEGIN {
    printf "%s: %d collectives a step x %.2f us = %.3f ms, %.3f %% of a %.1f ms step\n", name, c, us, c * us / 1e3,
           100 * c * us / 1e3 / ms, ms }'
  echo "$case: checked / unchecked step_ms, run against run: ${ratios[*]}"
done
