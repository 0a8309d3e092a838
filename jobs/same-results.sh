#!/usr/bin/env bash
# Shows that two hpctrain binaries train alike: the same fixed runs with each, then their
# metrics.jsonl losses and their checkpoints' tensors and positions compared, bit for bit.
# For changes that must not change results (a refactoring, a faster kernel that claims to be
# exact): build the commit before and after, and run
#   jobs/same-results.sh OLD_BIN NEW_BIN [--work DIR]
# Runs (each with both binaries):
#   fashion  fashion_cnn at -np 2 on 6,000 samples: 2 micro-batches per step, bf16 autocast,
#            random crop and flip, clipping, evaluation every 20 steps, a checkpoint every 10;
#            stopped by SIGUSR1 to mpirun after step 20 (exit 75) and resumed to the end
#   gpt      the byte-level gpt of configs/text_gpt.ini on text at -np 3, 60 steps, evaluation
#            every 30, a checkpoint every 20
# Compared: every metrics.jsonl record's step, epoch, loss, lr, grad_norm, skipped_steps,
# loss_scale, test_loss, test_acc, test_ppl (one record a step: a stop falls anywhere); every
# checkpoint both runs wrote (model, optim, sched, rng, metrics, loss_scaler groups by h5diff, and
# the step, epoch, cursor, world_size, model_name and config attributes). Exit 0: all the same.
set -uo pipefail
cd "$(dirname "$0")/.."
source jobs/env.sh

[ $# -ge 2 ] || { sed -n '2,16p' "$0"; exit 2; }
old=$(realpath "$1")
new=$(realpath "$2")
work=${4:-$(mktemp -d /tmp/same-results.XXXXXX)}
[ "${3:-}" = "--work" ] || [ $# -eq 2 ] || { echo "same-results.sh: unknown argument '$3'" >&2; exit 2; }
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
  --train.batch_size=8 --train.max_steps=60 --train.eval_every=30 --train.eval_batch_size=64
  --log.every_steps=1 --ckpt.every_steps=20 --ckpt.keep_last=0)

# fashion with binary $1 into run directory $2: stopped by SIGUSR1 once step 20 is logged, resumed.
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
  "${mpirun[@]}" -np 2 "$bin" train "${fashion_args[@]}" --run.dir="$dir" >>"$dir.log" 2>&1 ||
    { echo "fashion ($bin): the resume failed; see $dir.log"; return 1; }
  echo "fashion ($bin): $(grep -o 'stopped at step [0-9]*' "$dir.log" | head -n 1), resumed to the end"
}

run_gpt() {
  local bin=$1 dir=$2
  "${mpirun[@]}" -np 3 "$bin" train "${gpt_args[@]}" --run.dir="$dir" >"$dir.log" 2>&1 ||
    { echo "gpt ($bin): exit $?; see $dir.log"; return 1; }
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
    for group in model optim sched rng metrics loss_scaler; do
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
}

for which in old new; do
  bin=${!which}
  rm -rf "$work/fashion-$which" "$work/gpt-$which"
  run_fashion "$bin" "$work/fashion-$which" || failures=$((failures + 1))
  run_gpt "$bin" "$work/gpt-$which" || failures=$((failures + 1))
done
compare fashion "$work/fashion-old" "$work/fashion-new"
compare gpt "$work/gpt-old" "$work/gpt-new"
echo "work directory: $work"
if [ $failures -eq 0 ]; then echo "same-results: the same"; else echo "same-results: $failures difference(s)"; fi
[ $failures -eq 0 ]
