#!/usr/bin/env bash
# ctest `jobs_run_local` (label jobs): jobs/run-local.sh, the single-node launcher.
#  1. --dry-run with pretended GPUs and cores (RUN_LOCAL_GPUS, RUN_LOCAL_CORES): one rank per GPU
#     with NCCL_DEBUG; on CPU min(cores, 4) ranks of cores/ranks threads each, bound; --np
#     overrides; --oversubscribe only with more ranks than cores; --binary before $HPCTRAIN;
#  2. the printed line, eval'ed with mpirun replaced by a function that prints its argv, passes
#     arguments with spaces, quotes and empty values through unchanged;
#  3. an unknown option is one `run-local: error:` line and exit 2;
#  4. a real 3-step training run on 2 ranks through the script exits 0 with a checkpoint;
#  5. --interactive: refused without a terminal; piped answers through a pty (script); tmux keys;
#  6. --max-restarts: a rank killed with SIGKILL mid-run is restarted, the run resumes from its
#     newest checkpoint and ends at its step count; a config error is not restarted; a failure
#     that repeats stops after the limit with one line.
#   tests/jobs/run_local_test.sh SOURCE_DIR HPCTRAIN_BINARY
set -uo pipefail

source_dir=$(realpath "${1:?usage: run_local_test.sh SOURCE_DIR HPCTRAIN_BINARY}")
bin=$(realpath "${2:?usage: run_local_test.sh SOURCE_DIR HPCTRAIN_BINARY}")
script="$source_dir/jobs/run-local.sh"
work=$(mktemp -d /tmp/hpctrain-run-local-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset NCCL_DEBUG CUDA_VISIBLE_DEVICES HPCTRAIN RUN_LOCAL_GPUS RUN_LOCAL_CORES

dry() { "$script" --dry-run --binary "$bin" "$@"; }
has() { [[ " $1 " == *" $2 "* ]] || fail "expected '$2' in: $1"; }
lacks() { [[ " $1 " != *"$2"* ]] || fail "did not expect '$2' in: $1"; }

# 1. The choice of ranks, threads, binding and environment.
line=$(RUN_LOCAL_GPUS=4 RUN_LOCAL_CORES=16 dry train --config c.ini) || fail "dry run, 4 GPUs: exit $?"
has "$line" "-np 4"; has "$line" "NCCL_DEBUG=WARN"; has "$line" "--bind-to none"
has "$line" "$bin train --train.threads=4 --config c.ini"; lacks "$line" "--oversubscribe"
[ "$(wc -l <<< "$line")" -eq 1 ] || fail "the dry run printed more than one line: $line"

line=$(RUN_LOCAL_GPUS=0 RUN_LOCAL_CORES=8 dry train --config c.ini) || fail "dry run, 8 cores: exit $?"
has "$line" "-np 4"; has "$line" "--map-by slot:PE=2 --bind-to hwthread"
has "$line" "--train.threads=2"; lacks "$line" "NCCL_DEBUG"; lacks "$line" "--oversubscribe"
line=$(RUN_LOCAL_GPUS=0 RUN_LOCAL_CORES=2 dry train) || fail "dry run, 2 cores: exit $?"
has "$line" "-np 2"; has "$line" "--map-by slot:PE=1"; has "$line" "--train.threads=1"
line=$(RUN_LOCAL_GPUS=0 RUN_LOCAL_CORES=8 dry data inspect d) || fail "dry run, data inspect: exit $?"
has "$line" "$bin data inspect d"; lacks "$line" "--train.threads"

line=$(RUN_LOCAL_GPUS=0 RUN_LOCAL_CORES=8 dry --np 3 train) || fail "dry run, --np 3: exit $?"
has "$line" "-np 3"; has "$line" "--map-by slot:PE=2"; has "$line" "--train.threads=2"
line=$(RUN_LOCAL_GPUS=4 RUN_LOCAL_CORES=16 dry --np=3 eval) || fail "dry run, --np=3 on GPUs: exit $?"
has "$line" "-np 3"; has "$line" "--train.threads=5"
line=$(RUN_LOCAL_GPUS=0 RUN_LOCAL_CORES=2 dry --np 3 train --train.threads=7) || fail "dry run, 3 on 2: exit $?"
has "$line" "-np 3"; has "$line" "--oversubscribe --bind-to none"; has "$line" "$bin train --train.threads=7"

line=$(HPCTRAIN=/nonexistent RUN_LOCAL_GPUS=0 dry train) || fail "--binary did not take precedence over HPCTRAIN"
has "$line" "$bin train"
line=$(HPCTRAIN="$bin" RUN_LOCAL_GPUS=0 "$script" --dry-run train) || fail "dry run with HPCTRAIN: exit $?"
has "$line" "$bin train"

# 2. The printed line is one a shell runs with the same arguments and environment.
# shellcheck disable=SC2016  # '$HOME' must reach hpctrain unexpanded
args=(--config "configs/with space.ini" "--run.dir=/tmp/a b" "it's" "" '$HOME' 'a"b' '*')
line=$(RUN_LOCAL_GPUS=1 RUN_LOCAL_CORES=2 dry train "${args[@]}") || fail "dry run with spaces: exit $?"
# shellcheck disable=SC2317  # the stub is called by the eval'ed line
mapfile -t argv < <(mpirun() { echo "NCCL_DEBUG=$NCCL_DEBUG"; printf '%s\n' "$@"; }; cd "$work" && eval "$line")
[ "${argv[0]:-}" = NCCL_DEBUG=WARN ] || fail "eval of the printed line did not set NCCL_DEBUG: $line"
expected=("$bin" train --train.threads=2 "${args[@]}")
tail=("${argv[@]: -${#expected[@]}}")
[ "${tail[*]@Q}" = "${expected[*]@Q}" ] ||
  fail "the printed line does not round-trip: got ${tail[*]@Q}, want ${expected[*]@Q} (line: $line)"

# 3. Usage errors.
out=$("$script" --bogus train 2>&1); status=$?
[ "$status" -eq 2 ] || fail "an unknown option exited $status, not 2"
{ [ "$(wc -l <<< "$out")" -eq 1 ] && [[ "$out" == "run-local: error: "* ]]; } ||
  fail "an unknown option did not print one 'run-local: error:' line: $out"

# 4. A real run.
"$bin" prepare fashion-mnist --source /usr/share/datasets/fashion-mnist --out "$work/data" --limit 600 \
  > "$work/prepare.log" 2>&1 || fail "prepare: $(cat "$work/prepare.log")"
(cd "$source_dir" && RUN_LOCAL_GPUS=0 RUN_LOCAL_CORES=2 "$script" --binary "$bin" train \
   --config configs/fashion_cnn.ini --data.path="$work/data" --run.dir="$work/run" --train.max_steps=3 \
   --data.eval_split=) > "$work/train.log" 2>&1 || fail "the real run exited $?: $(cat "$work/train.log")"
grep -q "^run-local: .*mpirun -np 2 " "$work/train.log" || fail "the real run did not print its command line"
[ -f "$work/run/checkpoints/ckpt-3.h5" ] || fail "the real run left no checkpoints/ckpt-3.h5"

# 5. --interactive: refused without a terminal; answered through a pty (script) from a pipe, with
# wrong answers asked again, and in tmux, key by key. The binary is a stub that says its rank and
# arguments, so "runs it" is seen without training.
out=$("$script" --interactive --binary "$bin" < /dev/null 2>&1); status=$?
{ [ "$status" -eq 2 ] && [ "$(wc -l <<< "$out")" -eq 1 ] && [[ "$out" == "run-local: error: --interactive"* ]]; } ||
  fail "--interactive without a terminal: exit $status, not one error line: $out"
stub="$work/stub-hpctrain"
# shellcheck disable=SC2016  # the stub expands them
printf '#!/bin/sh\necho "stub rank $OMPI_COMM_WORLD_RANK: $*"\n' > "$stub" && chmod +x "$stub"
interactive="RUN_LOCAL_GPUS=0 RUN_LOCAL_CORES=2 $script --interactive --binary $stub"
# The menu lists configs/*.ini in order: one past the last is refused; fashion_cnn.ini is 1.
configs=("$source_dir"/configs/*.ini)
mlp_number=$(printf '%s\n' "${configs[@]}" | grep -n '/mlp\.ini$' | cut -d: -f1)
[ -n "$mlp_number" ] || fail "configs/mlp.ini is missing"
out=$(printf '%s\n1\n2\nsqrt\n\nfp16\nbf16\n%s\ny\n' "$((${#configs[@]} + 1))" "$work/irun" |
  script -qec "$interactive" /dev/null)
status=$?
[ "$status" -eq 0 ] || fail "--interactive with piped answers exited $status: $out"
for expected in "is neither a number from 1 to" "fp16 needs a GPU" "mpirun -np 2 " \
                "--config $source_dir/configs/fashion_cnn.ini --optim.lr_scaling=sqrt --optim.base_batch=64 --train.precision=bf16 --run.dir=$work/irun" \
                "stub rank 0: train --train.threads=1 --config" "stub rank 1: train"; do
  [[ "$out" == *"$expected"* ]] || fail "--interactive with piped answers did not print '$expected': $out"
done
out=$(printf '\n\n\n\n\nn\n' | script -qec "$interactive" /dev/null) || fail "--interactive, declined: exit $?: $out"
{ [[ "$out" == *"run-local: not run"* ]] && [[ "$out" != *"stub rank"* ]]; } || fail "--interactive ran a declined command: $out"

command -v tmux > /dev/null || fail "tmux is not installed (jobs/install-deps.sh installs it)"
socket="hpctrain-run-local-test-$$"
tmux_pane() { tmux -L "$socket" capture-pane -p -t ask; }
wait_for() {  # TEXT: until the pane shows it, at most 20 s
  for _ in $(seq 200); do tmux_pane | grep -qF -- "$1" && return 0; sleep 0.1; done
  fail "tmux: '$1' never appeared: $(tmux_pane)"
}
unset TMUX
tmux -L "$socket" new-session -d -s ask -x 250 -y 60 "$interactive; echo \$? > $work/tmux-exit; sleep 60" ||
  fail "tmux did not start"
trap 'tmux -L "$socket" kill-server 2> /dev/null; rm -rf "$work"' EXIT
for step in "config (a number:$mlp_number" "ranks (processes:1" "learning-rate scaling:" "precision (:fp32" \
            "run directory:$work/trun" "run it?:y"; do
  wait_for "${step%%:*}"
  [ -z "${step#*:}" ] || tmux -L "$socket" send-keys -t ask -l "${step#*:}"
  tmux -L "$socket" send-keys -t ask Enter
done
for _ in $(seq 200); do [ -s "$work/tmux-exit" ] && break; sleep 0.1; done
pane=$(tmux_pane)
[ "$(cat "$work/tmux-exit" 2> /dev/null)" = 0 ] || fail "--interactive in tmux did not exit 0: $pane"
for expected in "mpirun -np 1 " "configs/mlp.ini --optim.lr_scaling=none --train.precision=fp32 --run.dir=$work/trun" \
                "stub rank 0: train"; do
  [[ "$pane" == *"$expected"* ]] || fail "--interactive in tmux did not show '$expected': $pane"
done
# 6. --max-restarts.
out=$("$script" --binary "$bin" --max-restarts x train 2>&1); status=$?
{ [ "$status" -eq 2 ] && [[ "$out" == "run-local: error: --max-restarts wants a count"* ]]; } ||
  fail "--max-restarts x: exit $status: $out"
restartable() {  # RUN_DIR EXTRA...: a 2-rank run through the script with up to 2 restarts
  local dir=$1
  shift
  (cd "$source_dir" && RUN_LOCAL_GPUS=0 RUN_LOCAL_CORES=2 "$script" --binary "$bin" --max-restarts 2 train \
     --config configs/fashion_cnn.ini --data.path="$work/data" --run.dir="$dir" --data.eval_split= \
     --train.batch_size=8 --train.epochs=1000 --log.every_steps=100 "$@")
}
restartable "$work/rrun" --train.max_steps=1000 --ckpt.every_steps=50 > "$work/restart.log" 2>&1 &
runner=$!
for _ in $(seq 600); do [ -f "$work/rrun/checkpoints/ckpt-50.h5" ] && break; sleep 0.1; done
[ -f "$work/rrun/checkpoints/ckpt-50.h5" ] || fail "the restartable run wrote no ckpt-50.h5: $(cat "$work/restart.log")"
victim=$(pgrep -f -- "train .*--run.dir=$work/rrun" | while read -r pid; do
           [ "$(ps -o comm= -p "$pid")" = hpctrain ] && echo "$pid"; done | head -n 1)
[ -n "$victim" ] || fail "no rank of the restartable run to kill"
kill -9 "$victim"
wait "$runner" || fail "the restarted run exited $?: $(tail -n 20 "$work/restart.log")"
grep -q "^run-local: restart 1 of 2: the run failed with exit [0-9]* after" "$work/restart.log" ||
  fail "no restart line: $(cat "$work/restart.log")"
[ "$(grep -c "^run-local: restart" "$work/restart.log")" -eq 1 ] || fail "more than one restart: $(cat "$work/restart.log")"
grep -q "resumed from .*ckpt-" "$work/restart.log" || fail "the restart did not resume: $(cat "$work/restart.log")"
[ -f "$work/rrun/checkpoints/ckpt-1000.h5" ] || fail "the restarted run did not reach step 1000"

out=$(restartable "$work/bad" --train.no_such_option=1 2>&1); status=$?
{ [ "$status" -eq 2 ] && [[ "$out" == *"run-local: not restarted: exit 2 is a config or data error"* ]]; } ||
  fail "a config error: exit $status, or restarted: $out"
[ "$(grep -c "^run-local: restart" <<< "$out")" -eq 0 ] || fail "a config error was restarted: $out"
out=$(restartable "$work/again" --ckpt.resume="$work/no-such-checkpoint.h5" 2>&1); status=$?
[ "$status" -eq 4 ] || fail "a failure that repeats exited $status, not 4: $out"
[ "$(grep -c "^run-local: restart" <<< "$out")" -eq 2 ] || fail "not restarted exactly twice: $out"
grep -q "^run-local: error: the run failed with exit 4 after 2 restart(s), the most --max-restarts=2 allows" \
  <<< "$out" || fail "no giving-up line: $out"

echo "run_local_test: GPU/CPU rank choice, --np, quoting round-trip, usage error, a 2-rank run, --interactive" \
     "and --max-restarts all pass"
