#!/usr/bin/env bash
# LoRA adapters against full fine-tuning, from the same pretrained gpt (docs/benchmarks.md):
#   jobs/bench/lora.sh [--np 2] [--pretrain-steps 200] [--tune-steps 100] [--rounds 2]
#                      [--memory-steps 3] [--memory-block 1024] [--bin PATH] [--out DIR]
# 1. Pretrains a gpt of 6 blocks x 384 (block size 128, byte tokens) on Debian's licence texts.
# 2. Fine-tunes it on another text (Perl's diagnostics, perldiag.pod) for --tune-steps steps, with
#    LoRA (r = 8 on attn, alpha 16) and fully, alternately --rounds times, at --np ranks.
# 3. Prints, for each way: the held-out loss of the new text before (the base) and after, the
#    median step time, and the gradient bytes each step's allreduce carries (grad_mb: the buckets,
#    i.e. the trainable parameters' float32 bytes).
# 4. Peak RSS at GPT-2 small's shape for --memory-steps steps of --memory-block tokens:
#    jobs/bench/lora_memory.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."

np=2
pretrain_steps=200
tune_steps=100
rounds=2
memory_steps=3
memory_block=1024
bin=build/release/src/hpctrain
out=build/bench-lora
source jobs/bench/lib.sh
bench_options "$0" "np pretrain_steps tune_steps rounds memory_steps memory_block bin out" "$@"
bench_need_binary "$0" "$bin"
tune_text=/usr/share/perl/5.36/pod/perldiag.pod
[ -f "$tune_text" ] || tune_text=$(ls /usr/share/perl/*/pod/perldiag.pod 2>/dev/null | head -n 1)
[ -f "$tune_text" ] || { echo "lora.sh: no perldiag.pod (Debian's perl-modules) to fine-tune on" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mkdir -p "$out"
[ -f "$out/base-text/manifest.json" ] ||
  "$bin" prepare text --source /usr/share/common-licenses --out "$out/base-text" >/dev/null
[ -f "$out/tune-text/manifest.json" ] || "$bin" prepare text --source "$tune_text" --out "$out/tune-text" >/dev/null

shape=(--model.name=gpt --model.gpt_layers=6 --model.gpt_heads=6 --model.gpt_embd=384 --model.gpt_block_size=128
       --model.dropout=0 --train.threads=1 --train.batch_size=8 --train.epochs=100 --ckpt.keep_last=1 --log.every_steps=10)
base="$out/pretrain/checkpoints/ckpt-$pretrain_steps.h5"
if [ ! -f "$base" ]; then
  rm -rf "$out/pretrain"
  echo "pretraining $pretrain_steps steps on the licence texts ..." >&2
  mpirun --oversubscribe -np "$np" "$bin" train "${shape[@]}" --data.path="$out/base-text" --data.eval_split= \
    --optim.lr=0.001 --optim.schedule=cosine --optim.warmup_steps=20 --optim.decay_steps="$pretrain_steps" \
    --train.max_steps="$pretrain_steps" --run.dir="$out/pretrain" >"$out/pretrain.log" 2>&1
fi

# The held-out loss of the new text under checkpoint $1 (with the options after it).
held_out_loss() {
  local checkpoint=$1
  shift
  "$bin" eval --checkpoint "$checkpoint" "${shape[@]}" --data.path="$out/tune-text" --data.eval_split=val "$@" 2>&1 |
    sed -n 's/.*test_loss \([0-9.]*\).*/\1/p' | tail -n 1
}
median_of() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# The median of metrics field $2 over run $1's records after the first.
metric_median() { /usr/bin/python3 -c '
import json, sys
values = [json.loads(l)[sys.argv[2]] for l in open(sys.argv[1]) if sys.argv[2] in json.loads(l)][1:]
values.sort(); n = len(values)
print(values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2)' "$1" "$2"; }

lora=(--model.lora_rank=8 --model.lora_alpha=16 --model.lora_targets=attn)
declare -A options=([lora]="${lora[*]}" [full]="")
results=$(mktemp)
trap 'rm -f "$results"' EXIT
before=$(held_out_loss "$base" --model.init_from="$base")
for ((r = 1; r <= rounds; r++)); do
  order="lora full"
  [ $((r % 2)) -eq 0 ] && order="full lora"
  for way in $order; do
    run="$out/$way"
    rm -rf "$run"
    # shellcheck disable=SC2086  # the options are words
    mpirun --oversubscribe -np "$np" "$bin" train "${shape[@]}" ${options[$way]} --data.path="$out/tune-text" \
      --data.eval_split= --model.init_from="$base" --optim.lr=0.001 --train.max_steps="$tune_steps" \
      --run.dir="$run" >"$out/$way.log" 2>&1 || { tail -n 5 "$out/$way.log" >&2; exit 1; }
    # shellcheck disable=SC2086
    after=$(held_out_loss "$run/checkpoints/ckpt-$tune_steps.h5" ${options[$way]} --model.init_from="$base")
    step_ms=$(metric_median "$run/metrics.jsonl" step_ms)
    grad_mb=$(metric_median "$run/metrics.jsonl" grad_mb)
    echo "$way $after $step_ms $grad_mb" >>"$results"
    echo "round $r $way: held-out loss $before -> $after, step $step_ms ms, gradients $grad_mb MB a step" >&2
  done
done

echo "# lora.sh: $np ranks, gpt 6 x 384, $tune_steps fine-tuning steps from $pretrain_steps of pretraining; medians of $rounds rounds"
echo "held-out loss of the new text before fine-tuning: $before"
for way in lora full; do
  loss=$(awk -v w=$way '$1 == w { print $2 }' "$results" | median_of)
  ms=$(awk -v w=$way '$1 == w { print $3 }' "$results" | median_of)
  mb=$(awk -v w=$way '$1 == w { print $4 }' "$results" | median_of)
  echo "$way: held-out loss $loss, step $ms ms, gradient allreduce $mb MB a step"
  eval "${way}_ms=$ms; ${way}_mb=$mb"
done
awk -v lm="$lora_ms" -v fm="$full_ms" -v lb="$lora_mb" -v fb="$full_mb" 'BEGIN {
  printf "lora / full: step time %.3fx, gradient bytes %.4fx\n", lm / fm, lb / fb }'
jobs/bench/lora_memory.sh --steps "$memory_steps" --block "$memory_block" --bin "$bin" --out "$out"
