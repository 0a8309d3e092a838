# shellcheck shell=bash
# Sourced by the slurm/*.sbatch templates (from the submit directory, the repository root): runs
# hpctrain across the allocation, makes the job preemption-safe, and restarts it after a failure.
#
#   hpctrain_launch train OPTIONS...   runs `$HPCTRAIN train OPTIONS...` under srun (LAUNCHER=srun,
#                                      the default, with --mpi=$MPI_PLUGIN) or mpirun (LAUNCHER=mpirun)
#
# Preemption: the template asks Slurm for an early warning (#SBATCH --signal=B:USR1@<seconds>):
# this batch shell receives USR1 and hands it to the launcher, which forwards it to every rank;
# hpctrain then writes a checkpoint at the next step boundary and exits 75. On 75 the job requeues
# itself (scontrol requeue); the next start has SLURM_RESTART_COUNT=1, 2, ... and resumes from the
# run directory's `latest` checkpoint, since the run directory is keyed by the job id, which a
# requeue keeps.
#
# Failure: any other exit but 0 and the config and data errors 2 and 3 (which a restart would
# repeat) relaunches the step on the allocation's nodes that are still usable, keeping the global
# batch, up to HPCTRAIN_MAX_RESTARTS (default 3) times; with none usable the job requeues
# (slurm/restart.sh).

source "${SLURM_SUBMIT_DIR:-.}/slurm/restart.sh"

# Ranks per node: the template's --ntasks-per-node, else the tasks spread evenly.
hpctrain_tasks_per_node() {
  echo "${SLURM_NTASKS_PER_NODE:-$(( ${SLURM_NTASKS:-1} / ${SLURM_JOB_NUM_NODES:-1} ))}"
}

# Runs `$HPCTRAIN ARGS...` on the whole allocation (NODES "") or on the comma-separated NODES,
# passing Slurm's USR1 on to the ranks; returns the launcher's exit code.
# Usage: hpctrain_run_step NODES ARGS...
hpctrain_run_step() {
  local nodes=$1 tasks_per_node count
  shift
  tasks_per_node=$(hpctrain_tasks_per_node)
  count=$(tr ',' '\n' <<< "$nodes" | grep -c .) || true
  local -a command placement=()
  case "${LAUNCHER:-srun}" in
    srun)
      [ -z "$nodes" ] || placement=(--nodelist="$nodes" --nodes="$count" --ntasks="$((count * tasks_per_node))"
                                    --ntasks-per-node="$tasks_per_node")
      command=(srun --mpi="${MPI_PLUGIN:-pmix}" "${placement[@]}" "$HPCTRAIN" "$@") ;;
    mpirun)
      [ -z "$nodes" ] || placement=(--host "$(sed "s/,/:$tasks_per_node,/g; s/\$/:$tasks_per_node/" <<< "$nodes")")
      command=(mpirun --map-by "ppr:$tasks_per_node:node" "${placement[@]}" "$HPCTRAIN" "$@") ;;
    *) echo "hpctrain: LAUNCHER=$LAUNCHER: use srun or mpirun" >&2; return 2 ;;
  esac
  [ -n "$nodes" ] || count=${SLURM_JOB_NUM_NODES:-1}
  echo "hpctrain: job ${SLURM_JOB_ID} (requeued ${SLURM_RESTART_COUNT:-0} time(s)) on $count node(s)," \
       "$tasks_per_node task(s) each: ${command[*]}"
  # bash runs a trap only while it waits, so the launcher runs in the background.
  "${command[@]}" &
  local pid=$!
  # shellcheck disable=SC2064  # the pid is meant to be expanded now
  trap "echo 'hpctrain: USR1 from Slurm: asking the ranks to checkpoint and stop'; kill -USR1 $pid 2>/dev/null" USR1
  while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done  # a trap cuts a wait short
  local status=0
  wait "$pid" || status=$?
  trap - USR1
  return "$status"
}

# Requeues this job (REASON is said first); 75 when Slurm refuses.
hpctrain_requeue() {
  echo "hpctrain: $1; requeueing job ${SLURM_JOB_ID}"
  if ! scontrol requeue "${SLURM_JOB_ID}"; then
    echo "hpctrain: scontrol requeue failed (requeue not allowed here?); resubmit to resume" >&2
    return 75
  fi
}

hpctrain_launch() {
  local -a all_nodes=() relaunch=()
  mapfile -t all_nodes < <(scontrol show hostnames "${SLURM_JOB_NODELIST:-}" 2>/dev/null)
  local nodes="" status started plan planned
  while true; do
    started=$SECONDS
    status=0
    hpctrain_run_step "$nodes" "$@" "${relaunch[@]}" || status=$?
    case "$status" in
      0) return 0 ;;
      75) hpctrain_requeue "stopped with a checkpoint (exit 75)"; return ;;
      2 | 3)
        echo "hpctrain: not restarted: exit $status is a config or data error (docs/exit-codes.md)," \
             "which a restart would repeat" >&2
        return "$status" ;;
    esac
    [ "$1" = train ] || return "$status"
    planned=0
    plan=$(hpctrain_restart_plan "$status" "$((SECONDS - started))" "${all_nodes[@]}" -- "${@:2}") || planned=$?
    if [ "$planned" -eq 2 ]; then
      hpctrain_requeue "no usable node left"
      return
    fi
    [ "$planned" -eq 0 ] || return "$status"
    read -r nodes <<< "${plan%% *}"
    read -r -a relaunch <<< "${plan#"$nodes"}"
  done
}
