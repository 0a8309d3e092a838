#!/usr/bin/env bash
# Peak RSS of loading a sharded Hugging Face directory under dist.zero_stage=3:
#   jobs/bench/stage3_load.sh [--np 4] [--bin PATH]
# A 1024-wide, 8-layer Llama-shaped model (98.6 M parameters, about 376 MiB of float32, 4 shards)
# is trained for one step at --np ranks, three ways:
#   sharded   model.init_from read shard by shard (each rank copies only its part from the file)
#   whole     the same with model.init_strict=false, which builds the whole model on every rank
#             and then shards it
#   control   a 1-layer, 64-wide model of the same run: what the run costs without the model
#             (MPI's start-up, the data, the trainer)
# Each rank logs its peak RSS over its RSS before the model was built; the largest rank's growth
# less the control's is the load's. The target: at most (the rank's share of the parameters +
# two decoder layers) x 1.1.
set -euo pipefail
cd "$(dirname "$0")/../.."

np=4
bin=build/release/src/hpctrain
source jobs/bench/lib.sh
bench_options "$0" "np bin" "$@"
bench_need_binary "$0" "$bin"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
reference=(/usr/bin/python3 tests/support/llama_reference.py)
cat >"$work/big.json" <<JSON
{"vocab_size": 4096, "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
 "num_attention_heads": 16, "num_key_value_heads": 4, "max_position_embeddings": 1024}
JSON
cat >"$work/tiny.json" <<JSON
{"vocab_size": 4096, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024}
JSON
"${reference[@]}" make "$work/big" --family llama --config "$work/big.json" --shards 4
"${reference[@]}" make "$work/tiny" --family llama --config "$work/tiny.json"
/usr/bin/python3 -c "print('the quick brown fox jumps over the lazy dog\n' * 2000)" >"$work/text.txt"
"$bin" prepare text --source "$work/text.txt" --out "$work/tokens" >/dev/null

# The largest rank's growth and share, in MiB: "growth share".
measure() {  # NAME MODEL_DIR [OPTIONS...]
  local name=$1 model=$2
  shift 2
  mpirun --oversubscribe -np "$np" "$bin" train --model.name=llama --model.init_from="$model" \
    --data.path="$work/tokens" --data.eval_split=val --run.dir="$work/run-$name" --dist.zero_stage=3 --model.gpt_block_size=64 \
    --train.batch_size=1 --train.max_steps=1 --train.threads=1 --ckpt.keep_last=0 --log.all_ranks=true "$@" \
    >"$work/$name.log" 2>&1 || { cat "$work/$name.log" >&2; exit 1; }
  awk '
    function mib(value, unit) {
      return unit ~ /^GiB/ ? value * 1024 : unit ~ /^KiB/ ? value / 1024 : unit ~ /^B/ ? value / 1048576 : value
    }
    /peak RSS .* more than before the model/ {
      match($0, /, [0-9.]+ [KMG]?i?B more/)
      split(substr($0, RSTART + 2, RLENGTH - 2), g, " ")
      v = mib(g[1], g[2]); if (v > growth) growth = v
    }
    / holds [0-9.]+ [KMG]?i?B of parameters/ {
      match($0, / holds [0-9.]+ [KMG]?i?B/)
      split(substr($0, RSTART + 7, RLENGTH - 7), h, " ")
      v = mib(h[1], h[2]); if (v > share) share = v
    }
    END { printf "%.1f %.1f\n", growth, share }' "$work/$name.log"
}
read -r sharded share < <(measure sharded "$work/big")
read -r whole _ < <(measure whole "$work/big" --model.init_strict=false)
read -r control _ < <(measure control "$work/tiny")
layer_mib=$(/usr/bin/python3 -c "
import json; c = json.load(open('$work/big.json')); h = c['hidden_size']; d = h // c['num_attention_heads']
attention = h * d * (2 * c['num_attention_heads'] + 2 * c['num_key_value_heads'])
print('%.1f' % ((attention + 3 * h * c['intermediate_size'] + 2 * h) * 4 / 2**20))")
echo "# stage3_load.sh: $np ranks, $(git rev-parse --short HEAD 2>/dev/null || echo '?'); MiB, largest rank"
awk -v s="$sharded" -v w="$whole" -v c="$control" -v share="$share" -v layer="$layer_mib" 'BEGIN {
  target = (share + 2 * layer) * 1.1
  printf "share of the parameters %.1f, one decoder layer %.1f: target (share + 2 layers) x 1.1 = %.1f\n", share,
    layer, target
  printf "control (1-layer model) peak RSS growth %.1f\n", c
  printf "sharded load: peak RSS growth %.1f, less the control %.1f: %.2f of the target\n", s, s - c, (s - c) / target
  printf "whole model then sharded (model.init_strict=false): growth %.1f, less the control %.1f\n", w, w - c
}'
