#!/usr/bin/env bash
# Generation and weight loading, measured in one run:
#   jobs/bench/generate.sh [--rounds 3] [--new 128] [--layers 6] [--embd 384] [--heads 6]
#                          [--positions 256] [--threads 1] [--bin PATH]
# Makes a random GPT-2-layout model with tests/support/gpt2_reference.py (a 256-token vocabulary,
# so the byte tokenizer reads the prompt), then, --rounds times in turn, greedily continues a
# 64-byte prompt by --new tokens, as a batch of 1 and of 8 copies, with `hpctrain generate` with
# gpt's KV cache, without it, and with the Python module's own greedy loop (no cache) on the same
# weights. Prints the medians of tokens/s (a batch's: all its rows' new tokens over its time) and
# their ratios. Then the time model.init_from spends reading the safetensors file
# (its log line) against `dd` reading the same file, both from the page cache.
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=3 new=128 layers=6 embd=384 heads=6 positions=256 threads=1
bin=build/release/src/hpctrain
source jobs/bench/lib.sh
bench_options "$0" "rounds new layers embd heads positions threads bin" "$@"
bench_need_binary "$0" "$bin"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=$threads
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
reference=(/usr/bin/python3 tests/support/gpt2_reference.py)
"${reference[@]}" make "$work" --light --vocab 256 --layers "$layers" --heads "$heads" --embd "$embd" \
  --positions "$positions"
cat >"$work/model.ini" <<INI
[model]
name = gpt
gpt_layers = 0
gpt_embd = 0
gpt_block_size = 0
gpt_heads = $heads
gpt_activation = gelu_tanh
dropout = 0
[train]
threads = $threads
INI
prompt="The quick brown fox jumps over the lazy dog, and then it runs on"
for ((i = 0; i < 8; i++)); do echo "$prompt"; done >"$work/prompts8"
# The summed tokens/s of the JSON lines on standard input.
sum_rates() { /usr/bin/python3 -c "import json, sys; print(sum(json.loads(l)['tokens_per_s'] for l in sys.stdin))"; }
hpctrain_rate() {  # BATCH [generate flags...]
  local batch=$1
  shift
  local prompts=(--prompt "$prompt")
  [ "$batch" -gt 1 ] && prompts=(--prompts "$work/prompts8")
  "$bin" generate --weights "$work/gpt2.safetensors" --config "$work/model.ini" --tokenizer bytes "${prompts[@]}" \
    --batch-size "$batch" --max-new-tokens "$new" --temperature 0 "$@" 2>"$work/log" | sum_rates
}
python_rate() {  # BATCH
  "${reference[@]}" greedy "$work/gpt2.pt" --prompt "$prompt" --new "$new" --heads "$heads" --time --batch "$1" |
    /usr/bin/python3 -c "import json, sys; r = json.loads(sys.stdin.read()); print($1 * len(r['tokens']) / r['seconds'])"
}
for ((r = 0; r < rounds; r++)); do
  for batch in 1 8; do
    echo "cached$batch $(hpctrain_rate "$batch")" >>"$work/rates"
    echo "uncached$batch $(hpctrain_rate "$batch" --no-kv-cache)" >>"$work/rates"
    echo "python$batch $(python_rate "$batch")" >>"$work/rates"
  done
done
median() { awk -v k="$1" '$1 == k { print $2 }' "$work/rates" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
params=$(/usr/bin/python3 -c "import torch; print(sum(v.numel() for k, v in torch.load('$work/gpt2.pt').items() if k != 'lm_head.weight'))")
echo "model: $layers layers x $embd, $heads heads, $positions positions, vocabulary 256 ($params parameters); threads $threads"
echo "greedy, a 64-byte prompt + $new tokens, median of $rounds (tokens/s of the whole batch):"
for batch in 1 8; do
  cached=$(median "cached$batch") uncached=$(median "uncached$batch") python=$(median "python$batch")
  printf '  batch %d: hpctrain, KV cache   %10.1f tokens/s\n' "$batch" "$cached"
  printf '  batch %d: hpctrain, no cache   %10.1f tokens/s   (cache: %sx)\n' "$batch" "$uncached" "$(ratio "$cached" "$uncached")"
  printf '  batch %d: PyTorch greedy loop  %10.1f tokens/s   (hpctrain with cache: %sx)\n' "$batch" "$python" \
    "$(ratio "$cached" "$python")"
done
hpctrain_rate 1 >/dev/null
load=$(sed -n 's/.*model.init_from: .* in \([0-9.]*\) s.*/\1/p' "$work/log" | head -1)
bytes=$(stat -c %s "$work/gpt2.safetensors")
dd if="$work/gpt2.safetensors" of=/dev/null bs=4M 2>"$work/dd"
dd_s=$(awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") print $(i - 1) }' "$work/dd")
printf 'loading %d bytes of safetensors: model.init_from %s s, dd %s s (%sx of dd'"'"'s rate)\n' \
  "$bytes" "$load" "$dd_s" "$(ratio "$dd_s" "$load")"
