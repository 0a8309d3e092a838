#!/usr/bin/env bash
# Peak memory of LoRA against full fine-tuning at GPT-2 small's shape (docs/benchmarks.md):
#   jobs/bench/lora_memory.sh [--steps 3] [--block 1024] [--bin PATH] [--out DIR]
# Trains a gpt of 12 blocks x 768 (12 heads, byte tokens: 85 M parameters) on one rank, batch 1
# of --block tokens, for --steps steps, four ways: LoRA (r = 8 on attn, the base in bf16,
# model.lora_base_dtype) and full fine-tuning, each with its activations kept and with its blocks
# recomputed in backward (model.activation_checkpointing). Prints each way's peak RSS
# (peak_rss_mb) and median step time, and LoRA's RSS as a share of full fine-tuning's.
set -euo pipefail
cd "$(dirname "$0")/../.."

steps=3
block=1024
bin=build/release/src/hpctrain
out=build/bench-lora
source jobs/bench/lib.sh
bench_options "$0" "steps block bin out" "$@"
bench_need_binary "$0" "$bin"
text=/usr/share/perl/5.36/pod/perldiag.pod
[ -f "$text" ] || text=$(ls /usr/share/perl/*/pod/perldiag.pod 2>/dev/null | head -n 1)
[ -f "$text" ] || { echo "lora_memory.sh: no perldiag.pod (Debian's perl-modules) to train on" >&2; exit 2; }
export OMP_NUM_THREADS=1
mkdir -p "$out"
[ -f "$out/tune-text/manifest.json" ] || "$bin" prepare text --source "$text" --out "$out/tune-text" >/dev/null

# The largest and the median of metrics field $2 over run $1's records (the first step's left out
# of the median: it counts the FLOPs).
metric() { /usr/bin/python3 -c '
import json, sys
values = [json.loads(l)[sys.argv[2]] for l in open(sys.argv[1]) if sys.argv[2] in json.loads(l)]
rest = sorted(values[1:] or values); n = len(rest)
print(max(values) if sys.argv[3] == "max" else (rest[n // 2] if n % 2 else (rest[n // 2 - 1] + rest[n // 2]) / 2))' \
  "$1" "$2" "$3"; }

declare -A options=(
  [lora]="--model.lora_rank=8 --model.lora_alpha=16 --model.lora_targets=attn --model.lora_base_dtype=bf16"
  [full]="")
echo "# lora_memory.sh: gpt 12 x 768, one rank, batch 1 of $block tokens, $steps steps"
for recompute in false true; do
  for way in lora full; do
    run="$out/memory"
    rm -rf "$run"
    # shellcheck disable=SC2086  # the options are words
    "$bin" train --model.name=gpt --model.gpt_layers=12 --model.gpt_heads=12 --model.gpt_embd=768 \
      --model.gpt_block_size="$block" --model.dropout=0 --model.activation_checkpointing="$recompute" \
      --train.threads=1 --train.batch_size=1 --ckpt.save_final=false --ckpt.keep_last=1 --log.every_steps=1 \
      ${options[$way]} --data.path="$out/tune-text" --data.eval_split= --train.max_steps="$steps" \
      --run.dir="$run" >"$out/memory.log" 2>&1 || { tail -n 5 "$out/memory.log" >&2; exit 1; }
    rss=$(metric "$run/metrics.jsonl" peak_rss_mb max)
    ms=$(metric "$run/metrics.jsonl" step_ms median)
    eval "rss_${way}=$rss"
    printf '%s, activation_checkpointing=%s: peak RSS %.0f MiB, step %.0f ms\n' "$way" "$recompute" "$rss" "$ms"
  done
  awk -v l="$rss_lora" -v f="$rss_full" -v r="$recompute" \
    'BEGIN { printf "lora / full, activation_checkpointing=%s: peak RSS %.3fx\n", r, l / f }'
done
