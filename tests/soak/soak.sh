#!/usr/bin/env bash
# The soak test (docs/reliability.md): a 2-rank CPU run stopped by SIGUSR1 at random moments for
# MINUTES minutes and resumed each time by this driver, with a checkpoint every minute, must end
# with the same parameters, optimizer state, schedule and generators, bit for bit, as a run of the
# same steps that was never stopped (run afterwards, to the soak's last step).
#   tests/soak/soak.sh HPCTRAIN_BINARY SOURCE_DIR [--minutes M] [--pause A-B] [--seed S] [--keep DIR]
# --pause: seconds between signals, drawn uniformly (default 20-70; 4-12 for a minute's soak).
# Prints one summary line; exits 0 on a match, 1 otherwise.
set -uo pipefail

bin=$(realpath "${1:?usage: soak.sh HPCTRAIN_BINARY SOURCE_DIR [--minutes M] [--pause A-B] [--seed S] [--keep DIR]}")
source_dir=$(realpath "${2:?usage: soak.sh HPCTRAIN_BINARY SOURCE_DIR ...}")
shift 2
minutes=30 pause="" seed=$$ keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --pause) pause=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    *) echo "soak: error: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ -n "$pause" ] || { if [ "$minutes" -le 2 ]; then pause=4-12; else pause=20-70; fi; }
pause_min=${pause%-*} pause_max=${pause#*-}
RANDOM=$seed

work=${keep:-$(mktemp -d /tmp/hpctrain-soak.XXXXXX)}
mkdir -p "$work"
children=()
cleanup() {
  for pid in "${children[@]}"; do kill -9 "$pid" 2>/dev/null; done
  [ -n "$keep" ] || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "soak: FAIL: $*" >&2; tail -n 20 "$work"/*.log >&2 2>/dev/null; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$bin" prepare fashion-mnist --source /usr/share/datasets/fashion-mnist --out "$work/data" --limit 2400 \
  --shards 2 > /dev/null 2>&1 || fail "prepare"

K=100  # steps between the ranks' agreements on signals: the steps take about a millisecond
train() {  # RUN_DIR EXTRA...: the same training, never ending on its own. Run in the background,
  local dir=$1  # the function's subshell becomes mpirun (exec), so $! is mpirun's pid to signal.
  shift
  exec mpirun --oversubscribe -np 2 "$bin" train --config "$source_dir/configs/mlp.ini" --data.path="$work/data" \
    --run.dir="$dir" --model.mlp_hidden=64,32 --train.threads=1 --train.batch_size=16 --train.epochs=1000000 \
    --data.eval_split= --log.every_steps=$K --ckpt.check_every_steps=$K --optim.schedule=cosine \
    --optim.warmup_steps=100 --optim.decay_steps=10000000 "$@"
}

# The soak: a checkpoint every minute; SIGUSR1 to mpirun at random moments; resumed each time.
: > "$work/soak.log"
deadline=$(( $(date +%s) + minutes * 60 ))
starts=0 stops=0 others=0
while true; do
  starts=$((starts + 1))
  [ "$starts" -le 1000 ] || fail "more than 1000 starts"
  began=$(grep -c "starting fresh\|resumed from" "$work/soak.log")
  train "$work/soak" --ckpt.every_minutes=1 >> "$work/soak.log" 2>&1 &
  run=$!
  children+=("$run")
  # The pause counts from the moment the run is training, so that a slow start-up on a loaded
  # machine cannot swallow every pause; the signal then lands anywhere in training.
  for _ in $(seq 1200); do
    [ "$(grep -c "starting fresh\|resumed from" "$work/soak.log")" -gt "$began" ] && break
    kill -0 "$run" 2>/dev/null || break
    sleep 0.1
  done
  now=$(date +%s)
  wait_s=$(( pause_min + RANDOM % (pause_max - pause_min + 1) ))
  last=0
  if [ $((now + wait_s)) -ge "$deadline" ]; then  # the last stop; not before the run is under way
    wait_s=$(( deadline - now > pause_min ? deadline - now : pause_min ))
    last=1
  fi
  sleep "$wait_s"
  kill -0 "$run" 2>/dev/null || fail "the soak run ended on its own: $(tail -n 3 "$work/soak.log")"
  kill -USR1 "$run"
  status=0
  wait "$run" || status=$?
  if [ "$status" -eq 75 ]; then
    stops=$((stops + 1))
    [ "$last" -eq 1 ] && break
  else
    # The run died without a checkpoint (a signal before its handlers were in place, say); the
    # next start resumes from the last one. Count it and go on.
    others=$((others + 1))
  fi
done

# checkpoints/latest holds the newest checkpoint's file name (docs/checkpoint-format.md).
latest="$work/soak/checkpoints/$(cat "$work/soak/checkpoints/latest")" || fail "the soak left no checkpoint"
step=$(basename "$latest" .h5)
step=${step#ckpt-}
# The reference: the same steps, never stopped (its config differs only in train.max_steps,
# which the schedule does not read: optim.decay_steps fixes it).
(train "$work/reference" --train.max_steps="$step") > "$work/reference.log" 2>&1 ||
  fail "the reference run failed"
[ -f "$work/reference/checkpoints/ckpt-$step.h5" ] || fail "the reference wrote no ckpt-$step.h5"
resumes=$(grep -c "resumed from" "$work/soak.log")

for group in /model /optim /sched /rng; do
  h5diff -q "$work/reference/checkpoints/ckpt-$step.h5" "$latest" "$group" "$group" ||
    fail "$group at step $step differs between the soaked and the uninterrupted run"
done
echo "soak: $minutes min, $starts starts ($stops stopped by SIGUSR1 with a checkpoint, $others ended otherwise)," \
     "$resumes resumes, $step steps: model, optimizer, schedule and generators equal the" \
     "uninterrupted run's bit for bit (seed $seed)"
