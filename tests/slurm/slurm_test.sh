#!/usr/bin/env bash
# ctest `slurm_train` (label slurm): slurm/train.sbatch on a real Slurm started on this machine
# (tests/slurm/local_slurm.sh), in its CPU form with 2 tasks.
#  1. an uninterrupted run (LAUNCHER=mpirun) of 40 steps finishes with exit 0 and a checkpoint;
#  2. the same run through srun --mpi=pmix, sent USR1 as Slurm's early warning would be: it
#     checkpoints, exits 75, requeues itself, resumes (SLURM_RESTART_COUNT=1), finishes, and its
#     final parameters, optimizer state, schedule and generators equal run 1's bit for bit;
#  3. under srun, a frozen rank, a hung loader, a hung checkpoint write and a rank killed with -9
#     end the job, named by the rank watch.
# Exits 77 (a ctest skip, with a SKIP: line) only when Slurm cannot start here.
#   tests/slurm/slurm_test.sh HPCTRAIN_BINARY SOURCE_DIR
set -uo pipefail

bin=$(realpath "${1:?usage: slurm_test.sh HPCTRAIN_BINARY SOURCE_DIR}")
source_dir=$(realpath "${2:?usage: slurm_test.sh HPCTRAIN_BINARY SOURCE_DIR}")
source "$source_dir/tests/slurm/test_slurm.sh"
start_test_slurm slurm-test 1
# Part 3 checks how a fault ends the step; the relaunch after it is tests/slurm/slurm_restart_test.sh's.
export HPCTRAIN_MAX_RESTARTS=0

# 40 steps of 2 ranks x 32 over 1200 samples (19 steps an epoch), AdamW, dropout: what a resume
# must carry over exactly.
cpu_job=(--gpus-per-node=0 --ntasks-per-node=2 --cpus-per-task=1 --time=10 --chdir="$source_dir"
         --output="$work/job-%j.out")
train_args() {
  echo "--data.path=$work/data --run.dir=$work/$1 --train.threads=1 --data.eval_split= --train.batch_size=32" \
       "--train.epochs=100 --train.max_steps=40 --optim.name=adamw --log.every_steps=1"
}

# 1. Uninterrupted, through mpirun inside the allocation.
# shellcheck disable=SC2046
LAUNCHER=mpirun timeout 240 sbatch --wait --quiet "${cpu_job[@]}" slurm/train.sbatch $(train_args whole) ||
  fail "the uninterrupted job failed"
[ -f "$work/whole/checkpoints/ckpt-40.h5" ] || fail "run 1 left no ckpt-40.h5"

# 2. Through srun; USR1 to the batch shell once training is under way, as --signal=B:USR1@N does.
# sbatch --wait follows the job through its requeue and returns the last run's exit code.
# shellcheck disable=SC2046
timeout 240 sbatch --wait --parsable "${cpu_job[@]}" slurm/train.sbatch $(train_args preempted) \
  > "$work/sbatch.out" 2>&1 &
waiter=$!
for _ in $(seq 600); do [ -s "$work/preempted/metrics.jsonl" ] && break; sleep 0.1; done
[ -s "$work/preempted/metrics.jsonl" ] || fail "job 2 never started training"
job=$(head -n 1 "$work/sbatch.out")
scancel --signal=USR1 --batch "$job" || fail "scancel --signal=USR1 --batch $job"
wait "$waiter" || fail "the preempted job did not finish with exit 0: $(cat "$work/sbatch.out")"
out="$work/job-$job.out"
grep -q "stop requested (SIGUSR1" "$out" || fail "the ranks never saw USR1"
grep -q "requeueing job $job" "$out" || fail "the job did not requeue itself"
grep -q "Slurm job $job, restart 1" "$out" || fail "no second start with SLURM_RESTART_COUNT=1"
grep -q "resumed from $work/preempted/checkpoints/ckpt-" "$out" || fail "the second start did not resume"
grep -q "^done: 40 steps" "$out" || fail "the resumed run did not finish"
progress_ranks=$(grep -c "^\[1/2" "$out" || true)
[ "$progress_ranks" -eq 0 ] || fail "rank 1 printed progress lines"

for group in /model /optim /sched /rng; do
  h5diff -q "$work/whole/checkpoints/ckpt-40.h5" "$work/preempted/checkpoints/ckpt-40.h5" "$group" "$group" ||
    fail "$group differs between the uninterrupted and the preempted run"
done

# 3. Under srun, faults Slurm sees nothing wrong with, so the rank watch must end the job within
#    dist.timeout_s with a line saying who and what: rank 1 frozen (SIGSTOP) at its first step,
#    while rank 0 waits in a collective; rank 1's loader hung; rank 0's checkpoint write hung
#    (rank 1 waits in the barrier after it). Then a rank killed with -9 mid-run: Slurm's PMIx
#    plugin cancels the step itself ("task 1: Killed"); either way the job must end, naming rank 1
#    (docs/reliability.md).
expect_fault_ends_job() {  # NAME FAULT LINE_REGEX [OPTION...]
  local name=$1 fault=$2 line=$3
  shift 3
  # shellcheck disable=SC2046
  HPCTRAIN_FAULT=$fault timeout 120 sbatch --wait --parsable "${cpu_job[@]}" slurm/train.sbatch \
    $(train_args "$name") --dist.timeout_s=3 "$@" > "$work/$name.out" 2>&1
  local status=$?
  local job
  job=$(head -n 1 "$work/$name.out")
  [ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "the job with $fault ended with $status (124: it hung)"
  grep -Eq "$line" "$work/job-$job.out" || fail "no line of the job with $fault matches '$line'"
}
expect_fault_ends_job frozen stop@1:step "rank 1 \(.*\) has sent nothing for|rank 1 \(.*\) was furthest behind"
expect_fault_ends_job stuck-loader hang@1:loader \
  "\[rank 1/2 .*\] this rank has been waiting for the loader for|rank 1 \(.*\) was furthest behind.*waiting for the loader"
expect_fault_ends_job stuck-write hang@0:checkpoint \
  "\[rank 0/2 .*\] this rank has been writing a checkpoint for .* s \(step 2; dist.timeout_s=3\)" \
  --ckpt.every_steps=2

# shellcheck disable=SC2046
timeout 120 sbatch --wait --parsable "${cpu_job[@]}" slurm/train.sbatch $(train_args killed) --dist.timeout_s=3 \
  --train.max_steps=100000 > "$work/killed.out" 2>&1 &
waiter=$!
for _ in $(seq 600); do [ -s "$work/killed/metrics.jsonl" ] && break; sleep 0.1; done
[ -s "$work/killed/metrics.jsonl" ] || fail "job 4 never started training"
for pid in $(pgrep -f "run.dir=$work/killed "); do
  grep -qz '^SLURM_PROCID=1$' "/proc/$pid/environ" 2>/dev/null && kill -9 "$pid"
done
status=0
wait "$waiter" || status=$?
waiter=
job=$(head -n 1 "$work/killed.out")
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "the job with a killed rank ended with $status (124: it hung)"
grep -Eq "rank 1 \(.*\) has sent nothing for|rank 1 \(.*\) was furthest behind|task 1: Killed" "$work/job-$job.out" ||
  fail "no line named the killed rank 1"

echo "slurm_test: uninterrupted (mpirun) and preempted + requeued + resumed (srun) runs end bit-identical;" \
     "a frozen rank, a hung loader, a hung checkpoint write and a killed rank end their srun jobs, named"
