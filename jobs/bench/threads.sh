#!/usr/bin/env bash
# Threads per rank when ranks share cores (Note [Threads per rank] in include/hpctrain/core/system.h):
# configs/text_gpt.ini's network at -np 2, full training and LoRA (model.lora_rank=8), with the
# ranks bound to a core each (mpirun's default) and unbound (--bind-to none, as gpu-verify.sh and
# `srun --cpu-bind=none` start them) with the default train.threads=0 (the node's cores shared
# among its ranks), and unbound with train.threads set to every core (what 0 gave an unbound rank
# before: each took all the cores it saw). Cases run in turn, --rounds times; the median of each
# run's step_ms records after the first (docs/benchmarks.md, "Threads per rank").
#   jobs/bench/threads.sh [--rounds 3] [--steps 40] [--bin build/release/src/hpctrain] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
source jobs/bench/lib.sh
source jobs/env.sh
rounds=3 steps=40 bin=build/release/src/hpctrain out=build/bench-threads
bench_options "$0" "rounds steps bin out" "$@"
bench_need_binary "$0" "$bin"
mkdir -p "$out"
[ -f "$out/text/manifest.json" ] ||
  "$bin" prepare text --source /usr/share/common-licenses --out "$out/text" > /dev/null
cores=$(nproc)

run() {  # NAME BIND THREADS EXTRA...: the median step_ms of one run
  local name=$1 bind=$2 threads=$3
  shift 3
  rm -rf "$out/$name"
  mpirun --oversubscribe $bind -np 2 "$bin" train --config configs/text_gpt.ini --data.path="$out/text" \
    --run.dir="$out/$name" --data.eval_split= --train.max_steps="$steps" --log.every_steps=2 \
    --ckpt.save_final=false --log.tensorboard=false --train.threads="$threads" "$@" > "$out/$name.log" 2>&1
  /usr/bin/python3 -c '
import json, statistics, sys
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if "step_ms" in r][1:]
print(f"{statistics.median(ms):.1f}")' "$out/$name/metrics.jsonl"
}

thread_counts() { if [ "$1" = unbound ]; then echo "0 $cores"; else echo 0; fi; }
declare -A results
kinds=(full lora)
binds=("bound|--bind-to core" "unbound|--bind-to none")
for round in $(seq "$rounds"); do
  for kind in "${kinds[@]}"; do
    extra=()
    [ "$kind" = lora ] && extra=(--model.lora_rank=8 --model.lora_targets=attn,proj,fc,mlp_proj)
    for b in "${binds[@]}"; do
      bind_name=${b%%|*}
      for threads in $(thread_counts "$bind_name"); do
        key="$kind $bind_name threads=$threads"
        results[$key]+="$(run "$kind-$bind_name-$threads-$round" "${b#*|}" "$threads" "${extra[@]}") "
      done
    done
  done
done
echo "# text_gpt network, 2 ranks on $cores core(s), median step_ms per run ($rounds rounds, $steps steps)"
for kind in "${kinds[@]}"; do
  for b in "${binds[@]}"; do
    for threads in $(thread_counts "${b%%|*}"); do
      key="$kind ${b%%|*} threads=$threads"
      echo "$key: ${results[$key]}"
    done
  done
done
