#!/usr/bin/env bash
# How long a killed run takes to train again under jobs/run-local.sh --max-restarts, and what it
# loses (docs/reliability.md):
#   jobs/bench/recovery.sh [--rounds 3] [--every 20] [--steps 600] [--np 2] [--bin PATH] [--out DIR]
# Each round trains configs/fashion_cnn.ini (batch 32 per rank, a checkpoint every --every steps)
# through run-local.sh --max-restarts 1, kills one rank with SIGKILL at a random moment after the
# first checkpoint, and lets the script restart it. Per round it prints: the time from the kill
# to the first optimizer step of the resumed run (its start-up record's unix_time in
# metrics.jsonl), the steps done twice (the last step recorded before the kill less the step the
# resume started from), and whether the final checkpoint equals that of one run never killed,
# bit for bit (model, optimizer, schedule and generators: then every sample of the interrupted
# epoch counted exactly once).
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=3
every=20
steps=600
np=2
bin=build/release/src/hpctrain
out=build/bench-recovery
source jobs/bench/lib.sh
bench_options "$0" "rounds every steps np bin out" "$@"
bench_need_binary "$0" "$bin"
bin=$(realpath "$bin")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
bench_fashion_mnist "$bin" "$out/fashion"

train() {  # RUN_DIR EXTRA...: the run through run-local.sh, restarted once if it fails
  local dir=$1
  shift
  RUN_LOCAL_GPUS=0 jobs/run-local.sh --np "$np" --binary "$bin" --max-restarts 1 train \
    --config configs/fashion_cnn.ini --data.path="$out/fashion" --run.dir="$dir" --data.eval_split= \
    --train.batch_size=32 --train.max_steps="$steps" --ckpt.every_steps="$every" --log.every_steps=1 \
    --log.tensorboard=false "$@"
}

rm -rf "$out/reference"
train "$out/reference" > "$out/reference.log" 2>&1
reference="$out/reference/checkpoints/ckpt-$steps.h5"

for round in $(seq "$rounds"); do
  dir="$out/round-$round"
  rm -rf "$dir"
  train "$dir" > "$out/round-$round.log" 2>&1 &
  runner=$!
  until [ -f "$dir/checkpoints/ckpt-$every.h5" ]; do sleep 0.05; done
  sleep "$(/usr/bin/python3 -c 'import random; print(round(random.uniform(0.2, 1.5), 2))')"
  victim=$(pgrep -f -- "train .*--run.dir=$dir" | while read -r pid; do
             [ "$(ps -o comm= -p "$pid")" != hpctrain ] || { echo "$pid"; break; }; done)
  killed_at=$(date +%s.%N)
  kill -9 "$victim"
  wait "$runner"
  /usr/bin/python3 - "$dir/metrics.jsonl" "$killed_at" "$reference" "$dir/checkpoints/ckpt-$steps.h5" <<'EOF'
import json, subprocess, sys
records = [json.loads(line) for line in open(sys.argv[1])]
starts = [i for i, r in enumerate(records) if "first_step_s" in r]
resumed = records[starts[1]]
before = max(r["step"] for r in records[:starts[1]] if "step_ms" in r)
recovery = resumed["unix_time"] - float(sys.argv[2])
lost = before - (resumed["step"] - 1)
same = all(subprocess.run(["h5diff", "-q", sys.argv[3], sys.argv[4], g, g]).returncode == 0
           for g in ["/model", "/optim", "/sched", "/rng"])
print(f"killed at step {before}: resumed from step {resumed['step'] - 1}, {lost} step(s) done twice, "
      f"first step {recovery:.1f} s after the kill; final checkpoint "
      f"{'equals' if same else 'DIFFERS FROM'} the uninterrupted run's")
EOF
done
