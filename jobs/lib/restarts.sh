# shellcheck shell=bash
# Restarting a failed training run (sourced by jobs/run-local.sh --max-restarts):
#   run_with_restarts MAX COMMAND ARGS...
# runs COMMAND (an mpirun of `hpctrain train`) and, when it fails, runs it again, up to MAX times;
# the run resumes from its newest checkpoint (ckpt.resume=auto). Not restarted: 0 (done), 75
# (stopped by a signal with a checkpoint: the caller decides), 2 and 3 (a config or data error,
# which a restart would repeat). Each restart is one line on stderr with its reason; the function
# returns the last exit code. SIGUSR1, SIGTERM and SIGINT are passed on to the running command.

# Runs "$@" in the background, passing signals on; returns its exit code.
run_passing_signals() {
  "$@" &
  local child=$!
  trap 'kill -USR1 "$child" 2>/dev/null' USR1
  trap 'kill -TERM "$child" 2>/dev/null' TERM
  trap 'kill -INT "$child" 2>/dev/null' INT
  # A trapped signal ends `wait` early: wait until the child is gone, then take its exit code.
  while kill -0 "$child" 2>/dev/null; do wait "$child" 2>/dev/null || true; done
  local status=0
  wait "$child" || status=$?
  trap - USR1 TERM INT
  return "$status"
}

run_with_restarts() {
  local max=$1 restarts=0 status started
  shift
  while true; do
    started=$(date +%s)
    status=0
    run_passing_signals "$@" || status=$?
    case "$status" in
      0|75) return "$status" ;;
      2|3)
        echo "run-local: not restarted: exit $status is a config or data error (docs/exit-codes.md)," \
             "which a restart would repeat" >&2
        return "$status" ;;
    esac
    if [ "$restarts" -ge "$max" ]; then
      echo "run-local: error: the run failed with exit $status after $restarts restart(s), the most" \
           "--max-restarts=$max allows; giving up (its logs are in the run directory's logs/)" >&2
      return "$status"
    fi
    restarts=$((restarts + 1))
    echo "run-local: restart $restarts of $max: the run failed with exit $status after" \
         "$(( $(date +%s) - started )) s; starting it again, to resume from its newest checkpoint" \
         "($(date -u +%FT%TZ))" >&2
  done
}
