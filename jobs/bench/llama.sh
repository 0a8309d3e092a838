#!/usr/bin/env bash
# The llama decoder against its PyTorch eager twin (tests/support/llama_reference.py), on this CPU:
#   jobs/bench/llama.sh [--rounds 5] [--threads 2] [--new 128] [--bin PATH]
# 1. Whole training steps (forward, backward, AdamW multi-tensor as train takes them) of a
#    4-layer, 256-wide Llama-3-shaped model with GQA (vocabulary 4096, windows of 256, batch 4):
#    `hpctrain bench step --model llama --update` against jobs/bench/llama_step.py, fp32 and bf16,
#    the two alternating round by round; the medians of their medians and their ratio.
# 2. Greedy generation of --new tokens after a 16-token prompt, batch 1, with the KV cache, by
#    the same shape with the byte tokenizer's vocabulary of 256:
#    `hpctrain generate` (its tokens_per_s, the loading left out) against the reference's cached
#    loop (--time), alternating.
# 3. Loading a 4-shard directory of a 1024-wide, 8-layer model (about 400 MB of float32):
#    model.init_from's time (its log line) against `cat` reading the same shards, both from the
#    page cache, alternating.
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=5 threads=2 new=128
bin=build/release/src/hpctrain
source jobs/bench/lib.sh
bench_options "$0" "rounds threads new bin" "$@"
bench_need_binary "$0" "$bin"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=$threads
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
reference=(/usr/bin/python3 tests/support/llama_reference.py)
cat >"$work/step.json" <<JSON
{"model_type": "llama", "vocab_size": 4096, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
 "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": 1024, "rms_norm_eps": 1e-05,
 "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "float32"}
JSON
sed 's/"vocab_size": 4096/"vocab_size": 256/' "$work/step.json" >"$work/generate.json"
cat >"$work/load.json" <<JSON
{"vocab_size": 4096, "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
 "num_attention_heads": 16, "num_key_value_heads": 4, "max_position_embeddings": 1024}
JSON
shape=(--block-size 256 --batch-size 4 --steps 10)
ours_step() {  # PRECISION
  "$bin" bench step --model llama --hf-config "$work/step.json" --update --precision "$1" "${shape[@]}" 2>/dev/null |
    awk '/^step, AdamW multi-tensor/ { print $4 }'
}
theirs_step() {  # PRECISION
  /usr/bin/python3 jobs/bench/llama_step.py --hf-config "$work/step.json" --precision "$1" "${shape[@]}" |
    /usr/bin/python3 -c "import json, sys; print(json.load(sys.stdin)['step_ms'])"
}
"${reference[@]}" make "$work/generate" --family llama3 --config "$work/generate.json"
"${reference[@]}" make "$work/load" --family llama --config "$work/load.json" --shards 4
printf '[model]\nname = llama\n[train]\nthreads = %s\n' "$threads" >"$work/generate.ini"
prompt_ids=84,104,101,32,113,117,105,99,107,32,98,114,111,119,110,32
ours_generate() {
  "$bin" generate --weights "$work/generate" --config "$work/generate.ini" --tokenizer bytes --prompt "The quick brown " \
    --max-new-tokens "$new" --temperature 0 --ignore-eos 2>/dev/null |
    /usr/bin/python3 -c "import json, sys; print(json.loads(sys.stdin.read())['tokens_per_s'])"
}
theirs_generate() {
  "${reference[@]}" greedy "$work/generate" --prompt "$prompt_ids" --new "$new" --time |
    /usr/bin/python3 -c "import json, sys; r = json.load(sys.stdin); print(len(r['tokens']) / r['seconds'])"
}
ours_load() {
  "$bin" generate --weights "$work/load" --config "$work/generate.ini" --tokenizer bytes --prompt x --max-new-tokens 1 \
    2>&1 >/dev/null | sed -n 's/.*model.init_from: .* in \([0-9.]*\) s.*/\1/p' | head -1
}
raw_read() {
  local start end
  start=$(date +%s.%N)
  cat "$work"/load/model-*.safetensors >/dev/null
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.4f", b - a }'
}
cat "$work"/load/model-*.safetensors >/dev/null  # into the page cache
for ((r = 0; r < rounds; r++)); do
  for precision in fp32 bf16; do
    if ((r % 2 == 0)); then
      echo "ours-$precision $(ours_step "$precision")" >>"$work/figures"
      echo "theirs-$precision $(theirs_step "$precision")" >>"$work/figures"
    else
      echo "theirs-$precision $(theirs_step "$precision")" >>"$work/figures"
      echo "ours-$precision $(ours_step "$precision")" >>"$work/figures"
    fi
  done
  echo "ours-generate $(ours_generate)" >>"$work/figures"
  echo "theirs-generate $(theirs_generate)" >>"$work/figures"
  echo "ours-load $(ours_load)" >>"$work/figures"
  echo "raw-load $(raw_read)" >>"$work/figures"
done
median() { awk -v k="$1" '$1 == k { print $2 }' "$work/figures" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
range() { awk -v k="$1" '$1 == k { print $2 }' "$work/figures" | sort -g | awk 'NR == 1 { a = $1 } { b = $1 } END { print a "-" b }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
load_bytes=$(cat "$work"/load/model-*.safetensors | wc -c)
echo "median of $rounds rounds, $threads thread(s), $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
for precision in fp32 bf16; do
  ours=$(median "ours-$precision") theirs=$(median "theirs-$precision")
  printf 'training step %s: hpctrain %s ms (%s), PyTorch eager %s ms (%s): %sx\n' "$precision" "$ours" \
    "$(range "ours-$precision")" "$theirs" "$(range "theirs-$precision")" "$(ratio "$theirs" "$ours")"
done
ours=$(median ours-generate) theirs=$(median theirs-generate)
printf 'generation with the KV cache: hpctrain %.1f tokens/s, reference cached loop %.1f tokens/s: %sx\n' "$ours" "$theirs" \
  "$(ratio "$ours" "$theirs")"
ours=$(median ours-load) raw=$(median raw-load)
printf 'loading %d bytes in 4 shards: model.init_from %s s (%s), cat %s s (%s): %sx of the raw read'"'"'s rate\n' \
  "$load_bytes" "$ours" "$(range ours-load)" "$raw" "$(range raw-load)" "$(ratio "$raw" "$ours")"
