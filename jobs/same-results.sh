#!/usr/bin/env bash
# Shows that two hpctrain binaries train alike: the same fixed runs with each, then their
# metrics.jsonl losses, their checkpoints' tensors and positions, and the diffusion run's sampled
# images compared, bit for bit. For changes that must not change results (a refactoring, a
# faster kernel that claims to be exact): build the commit before and after, and run
#   jobs/same-results.sh OLD_BIN NEW_BIN [--work DIR] [--reuse-old] [--only RUN[,RUN...]]
# --reuse-old keeps OLD_BIN's runs already finished in DIR (each marks itself done).
# Runs (each with both binaries):
#   fashion  fashion_cnn at -np 2 on 6,000 samples: 2 micro-batches per step, bf16 autocast,
#            random crop and flip, clipping, evaluation every 20 steps, a checkpoint every 10;
#            stopped by SIGUSR1 to mpirun after step 20 (exit 75) and resumed to the end
#   gpt0..3  the byte-level gpt of configs/text_gpt.ini on text at -np 3 (an odd world size),
#            dist.zero_stage 0 to 3, 20 steps, evaluation and a checkpoint every 10
#   lora     the same gpt with LoRA adapters (rank 4 on attn and proj) at -np 2, 20 steps
#   ema      fashion_cnn at -np 2 with a moving average (train.ema_decay) kept sharded
#            (dist.zero_stage=1), 24 steps
#   unet     the diffusion unet of configs/fashion_ddpm.ini (16 channels) at -np 2, 20 steps with
#            a moving average, then `hpctrain sample` of 4 images by DDIM from its last checkpoint
#   resize   gpt at dist.zero_stage=2: 10 steps at -np 2, resumed at -np 3 to step 20
# Compared: every metrics.jsonl record's step, epoch, loss, lr, grad_norm, skipped_steps,
# loss_scale, test_loss, test_acc, test_ppl (one record a step: a stop falls anywhere); every
# checkpoint both runs wrote (model, optim, sched, rng, metrics, loss_scaler, ema, base groups by
# h5diff, and the step, epoch, cursor, world_size, model_name and config attributes); the sampled
# PNG files byte for byte. Exit 0: all the same.
set -uo pipefail
cd "$(dirname "$0")/.."
source jobs/env.sh

usage() { sed -n '2,25p' "$0"; exit 2; }
[ $# -ge 2 ] || usage
old=$(realpath "$1")
new=$(realpath "$2")
shift 2
work="" reuse_old=false only="fashion,gpt0,gpt1,gpt2,gpt3,lora,ema,unet,resize"
while [ $# -gt 0 ]; do
  case $1 in
    --work) work=$2; shift 2 ;;
    --reuse-old) reuse_old=true; shift ;;
    --only) only=$2; shift 2 ;;
    *) echo "same-results.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[ -n "$work" ] || work=$(mktemp -d /tmp/same-results.XXXXXX)
mkdir -p "$work"
mpirun=(mpirun --oversubscribe)
failures=0

# The data, once, by the old binary.
if [ ! -f "$work/fashion/manifest.json" ]; then
  "$old" prepare fashion-mnist --source /usr/share/datasets/fashion-mnist --out "$work/fashion" \
    --limit 6000 --shards 2 >/dev/null || exit 1
fi
if [ ! -f "$work/text/manifest.json" ]; then
  "$old" prepare text --source /usr/share/common-licenses --out "$work/text" >/dev/null || exit 1
fi

fashion_args=(--config configs/fashion_cnn.ini --data.path="$work/fashion" --train.threads=1
  --train.batch_size=32 --train.accum_steps=2 --train.precision=bf16 --train.epochs=2
  --data.random_crop=2 --data.random_flip=true --optim.clip_grad_norm=1.0 --train.eval_every=20
  --log.every_steps=1 --ckpt.every_steps=10 --ckpt.keep_last=0)
gpt_args=(--config configs/text_gpt.ini --data.path="$work/text" --train.threads=1
  --train.batch_size=8 --train.max_steps=20 --train.eval_every=10 --train.eval_batch_size=64
  --log.every_steps=1 --ckpt.every_steps=10 --ckpt.keep_last=0)
ema_args=(--config configs/fashion_cnn.ini --data.path="$work/fashion" --train.threads=1
  --train.batch_size=32 --train.max_steps=24 --train.ema_decay=0.9 --dist.zero_stage=1
  --train.eval_every=12 --log.every_steps=1 --ckpt.every_steps=12 --ckpt.keep_last=0)
unet_args=(--config configs/fashion_ddpm.ini --data.path="$work/fashion" --train.threads=1
  --model.unet_channels=16 --train.batch_size=16 --train.max_steps=20 --train.ema_decay=0.9
  --optim.warmup_steps=5 --log.every_steps=1 --ckpt.every_steps=10 --ckpt.keep_last=0)

# One run: name, binary, run directory; each `train` call's log goes to DIR.log.
train() {
  local name=$1 bin=$2 dir=$3 np=$4
  shift 4
  "${mpirun[@]}" -np "$np" "$bin" train "$@" --run.dir="$dir" >>"$dir.log" 2>&1 ||
    { echo "$name ($bin): exit $?; see $dir.log"; return 1; }
}

# fashion: stopped by SIGUSR1 once step 20 is logged, resumed.
run_fashion() {
  local bin=$1 dir=$2
  "${mpirun[@]}" -np 2 "$bin" train "${fashion_args[@]}" --run.dir="$dir" >"$dir.log" 2>&1 &
  local pid=$!
  until grep -q '"step":2[0-9],' "$dir/metrics.jsonl" 2>/dev/null || ! kill -0 $pid 2>/dev/null; do
    sleep 0.05
  done
  kill -USR1 $pid 2>/dev/null
  wait $pid
  local rc=$?
  [ $rc -eq 75 ] || { echo "fashion ($bin): exit $rc, expected 75 after SIGUSR1; see $dir.log"; return 1; }
  train fashion "$bin" "$dir" 2 "${fashion_args[@]}" || return 1
  echo "fashion ($bin): $(grep -o 'stopped at step [0-9]*' "$dir.log" | head -n 1), resumed to the end"
}

run_gpt() { train "gpt$3" "$1" "$2" 3 "${gpt_args[@]}" --dist.zero_stage="$3"; }
run_lora() {
  train lora "$1" "$2" 2 "${gpt_args[@]}" --model.lora_rank=4 --model.lora_alpha=8 --model.lora_targets=attn,proj
}
run_ema() { train ema "$1" "$2" 2 "${ema_args[@]}"; }
run_unet() {
  local bin=$1 dir=$2
  train unet "$bin" "$dir" 2 "${unet_args[@]}" || return 1
  "${mpirun[@]}" -np 2 "$bin" sample --checkpoint "$dir/checkpoints/ckpt-20.h5" --out "$dir/samples" --count 4 \
    --steps 5 --seed 3 >>"$dir.log" 2>&1 || { echo "unet ($bin): sample failed; see $dir.log"; return 1; }
}
run_resize() {
  local bin=$1 dir=$2
  train resize "$bin" "$dir" 2 "${gpt_args[@]}" --dist.zero_stage=2 --train.max_steps=10 || return 1
  train resize "$bin" "$dir" 3 "${gpt_args[@]}" --dist.zero_stage=2
}

run() {
  local name=$1 bin=$2 dir=$3
  case $name in
    fashion) run_fashion "$bin" "$dir" ;;
    gpt[0-3]) run_gpt "$bin" "$dir" "${name#gpt}" ;;
    *) "run_$name" "$bin" "$dir" ;;
  esac
}

# The compared fields of every record, one line each.
metric_lines() {
  python3 - "$1" <<'EOF'
import json, sys
keys = ["step", "epoch", "loss", "lr", "grad_norm", "skipped_steps", "loss_scale", "test_loss", "test_acc", "test_ppl"]
for line in open(sys.argv[1]):
    record = json.loads(line)
    if "first_step_s" in record:
        continue
    print(" ".join(f"{k}={record[k]!r}" for k in keys if k in record))
EOF
}

# Root attributes that must match (not the time written or the writer's version).
checkpoint_position() {
  for attribute in step epoch cursor world_size model_name config; do
    h5dump -a "/$attribute" "$1" | sed -n '/DATA {/,/}/p' | grep -v '^ *dir = '  # run.dir differs
  done
}

compare() {
  local name=$1 a=$2 b=$3
  local diff_out
  if ! diff_out=$(diff <(metric_lines "$a/metrics.jsonl") <(metric_lines "$b/metrics.jsonl")); then
    echo "$name: metrics.jsonl differs:"; echo "$diff_out" | head -n 10
    failures=$((failures + 1))
  else
    echo "$name: metrics.jsonl the same ($(metric_lines "$a/metrics.jsonl" | wc -l) records)"
  fi
  local common=0
  for f in "$a"/checkpoints/ckpt-*.h5; do
    local g="$b/checkpoints/$(basename "$f")"
    [ -f "$g" ] || continue
    common=$((common + 1))
    for group in model optim sched rng metrics loss_scaler ema base; do
      local in_a in_b
      in_a=$(h5ls "$f/$group" >/dev/null 2>&1 && echo yes)
      in_b=$(h5ls "$g/$group" >/dev/null 2>&1 && echo yes)
      if [ "$in_a" != "$in_b" ]; then
        echo "$name: $(basename "$f"): group /$group in one checkpoint only"; failures=$((failures + 1))
      elif [ -n "$in_a" ] && ! h5diff -q "$f" "$g" "/$group" "/$group"; then
        echo "$name: $(basename "$f"): /$group differs"; failures=$((failures + 1))
      fi
    done
    if ! diff -q <(checkpoint_position "$f") <(checkpoint_position "$g") >/dev/null; then
      echo "$name: $(basename "$f"): position or config differs"; failures=$((failures + 1))
    fi
  done
  echo "$name: $common checkpoint(s) written by both compared"
  [ $common -gt 0 ] || failures=$((failures + 1))
  if [ -d "$a/samples" ] || [ -d "$b/samples" ]; then
    if diff -rq "$a/samples" "$b/samples" >/dev/null 2>&1; then
      echo "$name: $(ls "$a/samples" | wc -l) sampled files the same"
    else
      echo "$name: the sampled images differ"; failures=$((failures + 1))
    fi
  fi
}

IFS=, read -ra runs <<<"$only"
for which in old new; do
  bin=${!which}
  for name in "${runs[@]}"; do
    dir="$work/$name-$which"
    if [ "$which" = old ] && $reuse_old && [ -f "$dir.done" ]; then continue; fi
    rm -rf "$dir" "$dir.log" "$dir.done"
    if run "$name" "$bin" "$dir"; then touch "$dir.done"; else failures=$((failures + 1)); fi
  done
done
for name in "${runs[@]}"; do compare "$name" "$work/$name-old" "$work/$name-new"; done
echo "work directory: $work"
if [ $failures -eq 0 ]; then echo "same-results: the same"; else echo "same-results: $failures difference(s)"; fi
[ $failures -eq 0 ]
