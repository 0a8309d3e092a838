# Sourced by the slurm/*.sbatch templates (from the submit directory, the repository root): runs
# hpctrain across the allocation and makes the job preemption-safe.
#
#   hpctrain_launch ARGS...   runs `$HPCTRAIN ARGS...` under srun (LAUNCHER=srun, the default,
#                             with --mpi=$MPI_PLUGIN) or mpirun (LAUNCHER=mpirun)
#
# The template asks Slurm for an early warning (#SBATCH --signal=B:USR1@<seconds>): this batch
# shell receives USR1 and hands it to the launcher, which forwards it to every rank; hpctrain then
# writes a checkpoint at the next step boundary and exits 75. On 75 the job requeues itself
# (scontrol requeue); the next start has SLURM_RESTART_COUNT=1, 2, ... and resumes from the run
# directory's `latest` checkpoint, since the run directory is keyed by the job id, which a requeue
# keeps. Any other exit code ends the job with that code.

hpctrain_launch() {
  local launcher=${LAUNCHER:-srun}
  local -a command
  case "$launcher" in
    srun) command=(srun --mpi="${MPI_PLUGIN:-pmix}" "$HPCTRAIN" "$@") ;;
    mpirun) command=(mpirun --map-by "ppr:${SLURM_NTASKS_PER_NODE:-1}:node" "$HPCTRAIN" "$@") ;;
    *) echo "hpctrain: LAUNCHER=$launcher: use srun or mpirun" >&2; return 2 ;;
  esac
  echo "hpctrain: job ${SLURM_JOB_ID} (${SLURM_JOB_NUM_NODES:-1} node(s), ${SLURM_NTASKS:-?} tasks)," \
       "restart ${SLURM_RESTART_COUNT:-0}: ${command[*]}"
  # bash runs a trap only while it waits, so the launcher runs in the background.
  "${command[@]}" &
  local pid=$!
  trap "echo 'hpctrain: USR1 from Slurm: asking the ranks to checkpoint and stop'; kill -USR1 $pid 2>/dev/null" USR1
  while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done  # a trap cuts a wait short
  local status=0
  wait "$pid" || status=$?
  trap - USR1
  if [ "$status" -eq 75 ]; then
    echo "hpctrain: stopped with a checkpoint (exit 75); requeueing job ${SLURM_JOB_ID}"
    if ! scontrol requeue "${SLURM_JOB_ID}"; then
      echo "hpctrain: scontrol requeue failed (requeue not allowed here?); resubmit to resume" >&2
      return 75
    fi
    return 0
  fi
  return "$status"
}
