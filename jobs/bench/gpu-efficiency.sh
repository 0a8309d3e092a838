# shellcheck shell=bash disable=SC2154
# GPT-2 small's training efficiency on one GPU, sourced by jobs/bench/gpu-verify.sh (which defines
# run_step, record, steady_rate, last_value, launch, bin, out, text and known_gpu): whole bf16
# optimizer steps (`bench step --update`: AdamW per tensor, multi-tensor, and from a CUDA graph)
# at batches 8, 16 and 32 with a profile of one, PyTorch eager and torch.compile timing the same
# steps (jobs/bench/torch_step.py --update [--compile]), and `hpctrain train` on token shards with
# a checkpoint every 50 steps (in the background, then written while training waits) against
# `bench step --update` of the same network. docs/benchmarks.md, "GPU efficiency", reads the
# summary rows.

# bench step --update on GPT-2 small in bf16, as every case here runs it.
gpt2_update=(bench step --model gpt --device cuda --precision bf16 --update)

# The row of `case` in a bench step table: "ms samples/s tokens/s TFLOP/s MFU".
bench_row() { grep "^$2 " "$out/$1.log" | sed "s/^$2 *//" | tr -s ' '; }
# A field of torch_step.py's JSON line.
torch_field() { python3 -c 'import json,sys
lines=[l for l in open(sys.argv[1]) if l.startswith("{")]
print(json.loads(lines[-1])[sys.argv[2]] if lines else "none")' "$1" "$2" 2>/dev/null; }
# "ms tokens/s" of the multi-tensor row or the CUDA-graph row, for ratios.
row_field() { bench_row "$1" "$2" | awk -v f="$3" '{print $f}'; }

# The cases, in order, from GPU_EFFICIENCY_CASES (default: all of them; a shorter lease runs a
# few): b8 (with a profile), b16 and b32 (bench step --update at that batch), eager and compile
# (torch_step.py --update at batch 8), loop (the training loop three ways against bench step) and
# loop-async (the loop with background checkpoints alone).
efficiency_checks() {
  rm -rf "$out"/run-gpt2-* "$out/text-gpt2"  # a run directory left from an earlier call would be resumed
  local case
  for case in ${GPU_EFFICIENCY_CASES:-b8 eager b16 b32 loop compile}; do
    case "$case" in
      b8) update_case 8
          run_step profile_summary 30 python3 jobs/bench/profile_summary.py "$out/profile_b8.json" --steps 3
          record "profile gpt2 bf16 b8" "$status" "$seconds" "$(grep -m1 'GPU span' "$out/profile_summary.log" | tr -s ' ')" ;;
      b16|b32) update_case "${case#b}" ;;
      eager|compile) torch_case "$case" ;;
      loop) loop_cases async sync graphs ;;
      loop-async) loop_cases async ;;
      *) record "case $case" FAIL 0 "unknown (GPU_EFFICIENCY_CASES)" ;;
    esac
  done
  local ours_graph ours_fused eager compiled
  ours_graph=$(row_field update_b8 "step, multi-tensor + CUDA graph" 3)
  ours_fused=$(row_field update_b8 "step, AdamW multi-tensor" 3)
  eager=$(torch_field "$out/torch_update_eager.log" tokens_per_s)
  compiled=$(torch_field "$out/torch_update_compile.log" tokens_per_s)
  record "gpt2 b8 against pytorch" PASS 0 "$(python3 -c 'import sys
g, f, e, c = (float(x) if x not in ("", "none") else float("nan") for x in sys.argv[1:])
print(f"tokens/s: multi-tensor {f/e:.3f}x eager, {f/c:.3f}x compile; CUDA graph {g/e:.3f}x eager, {g/c:.3f}x compile")' \
    "$ours_graph" "$ours_fused" "$eager" "$compiled" 2>&1)"
}

# bench step --update at batch $1 (with a profile at batch 8): three summary rows.
update_case() {
  local batch=$1
  local profile=()
  [ "$batch" = 8 ] && profile=(--profile "$out/profile_b8.json")
  run_step "update_b$batch" 120 "${launch[@]}" "$bin" "${gpt2_update[@]}" --cuda-graphs --batch-size "$batch" --steps 60 "${profile[@]}"
  if [ "$status" != PASS ]; then
    # Without the graph and the profile, so that one failing does not lose the other rows.
    record "gpt2 bf16 b$batch graph+profile" "$status" "$seconds" "$(grep -m1 'error' "$out/update_b$batch.log")"
    mv "$out/update_b$batch.log" "$out/update_b$batch.failed.log"
    run_step "update_b$batch" 120 "${launch[@]}" "$bin" "${gpt2_update[@]}" --batch-size "$batch" --steps 60
  fi
  local graph="step, multi-tensor + CUDA graph"
  record "gpt2 bf16 b$batch per tensor" "$status" "$seconds" "$(bench_row "update_b$batch" "step, AdamW per tensor")"
  record "gpt2 bf16 b$batch multi-tensor" "$status" 0 "$(bench_row "update_b$batch" "step, AdamW multi-tensor")"
  record "gpt2 bf16 b$batch CUDA graph" "$status" 0 "$(bench_row "update_b$batch" "$graph"); $(grep -o 'GPU memory in use.*' "$out/update_b$batch.log")"
}

# torch_step.py --update, eager or compile (default mode), batch 8.
torch_case() {
  local mode=$1 flags=()
  [ "$mode" = compile ] && flags=(--compile)
  run_step "torch_update_$mode" 200 python3 jobs/bench/torch_step.py --device cuda --precision bf16 --update --steps 60 "${flags[@]}"
  record "pytorch $mode gpt2 b8" "$status" "$seconds" \
    "$(torch_field "$out/torch_update_$mode.log" step_ms) ms, $(torch_field "$out/torch_update_$mode.log" tokens_per_s) tokens/s"
}

# The training loop on token shards (byte-level, vocabulary 256) with a checkpoint every 50
# steps, each way in "$@": async (in the background), sync (training waits for the write), graphs
# (async with train.cuda_graphs); with all three, also against bench step --update of the same
# network.
loop_cases() {
  run_step prepare_text_gpt2 60 "$bin" prepare text --source "$text" --out "$out/text-gpt2"
  local loop=(train --config configs/text_gpt.ini --data.path="$out/text-gpt2" --data.eval_split= --dist.device=cuda
              --dist.backend=nccl --model.gpt_layers=12 --model.gpt_heads=12 --model.gpt_embd=768
              --model.gpt_block_size=1024 --model.dropout=0 --optim.clip_grad_norm=0 --optim.weight_decay=0.0001
              --optim.decay_bias_and_norm=true --optim.schedule=constant --optim.warmup_steps=0
              --train.batch_size=8 --train.precision=bf16 --train.max_steps=150 --log.every_steps=25
              --ckpt.every_steps=50)
  local how
  for how in "$@"; do
    local extra=(--ckpt.async=true)
    [ "$how" = sync ] && extra=(--ckpt.async=false)
    [ "$how" = graphs ] && extra=(--ckpt.async=true --train.cuda_graphs=true)
    run_step "loop_$how" 120 "${launch[@]}" "$bin" "${loop[@]}" --run.dir="$out/run-gpt2-$how" "${extra[@]}"
    local rate waited
    rate=$(steady_rate "$out/run-gpt2-$how/metrics.jsonl" tokens_per_s)
    waited=$(grep -o 'training waited [0-9.]* s\|written in [0-9.]* s ([^;]*; training waited for it' "$out/loop_$how.log" |
             grep -o '[0-9.]* s' | tr '\n' ' ')
    record "train gpt2 b8 $how ckpt" "$status" "$seconds" \
      "$rate tokens/s, data_ms $(last_value "$out/run-gpt2-$how/metrics.jsonl" data_ms), MFU $(last_value "$out/run-gpt2-$how/metrics.jsonl" mfu); checkpoint waits: $waited"
  done
  [ $# -eq 3 ] || return 0
  run_step update_v256 90 "${launch[@]}" "$bin" "${gpt2_update[@]}" --cuda-graphs --batch-size 8 --steps 40 --vocab 256
  record "loop against bench step" PASS 0 "$(python3 -c 'import sys
a, s, g, bf, bg = (float(x) if x not in ("", "none") else float("nan") for x in sys.argv[1:])
print(f"async {a/bf:.3f}x, sync {s/bf:.3f}x of multi-tensor; graphs {g/bg:.3f}x of the CUDA-graph row")' \
    "$(steady_rate "$out/run-gpt2-async/metrics.jsonl" tokens_per_s)" \
    "$(steady_rate "$out/run-gpt2-sync/metrics.jsonl" tokens_per_s)" \
    "$(steady_rate "$out/run-gpt2-graphs/metrics.jsonl" tokens_per_s)" \
    "$(row_field update_v256 "step, AdamW multi-tensor" 3)" \
    "$(row_field update_v256 "step, multi-tensor + CUDA graph" 3)" 2>&1)"
}
