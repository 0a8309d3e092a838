# shellcheck shell=bash
# Sourced by slurm/launch.sh: what a Slurm job does when its training step fails (an exit other
# than 0, 75 and the config and data errors 2 and 3): it finds the nodes of its allocation that
# are still usable, relaunches on them, keeping the global batch, and the run resumes from its
# newest checkpoint. docs/slurm.md, "Failures: relaunch on the nodes that are left".
#
#   HPCTRAIN_MAX_RESTARTS  restarts allowed over the job's life, requeues included (default 3)
#   HPCTRAIN_PROBE_TIMEOUT seconds one node's `hpctrain doctor` may take (default 120)
#
# Each restart is a line in the job's output and in the run directory's restarts.log, which also
# counts them across requeues (a requeue keeps the run directory).

# The nodes, one per line, where Slurm's view of the node allows work and a one-task
# `hpctrain doctor` (the training step's options) answers. A node that is not is named on stderr
# with the reason. Usage: hpctrain_usable_nodes NODE... -- TRAIN_OPTIONS...
hpctrain_usable_nodes() {
  local -a nodes=()
  while [ "$1" != -- ]; do nodes+=("$1"); shift; done
  shift
  local node state
  local probes
  probes=$(mktemp -d)
  for node in "${nodes[@]}"; do
    state=$(sinfo -h -N -n "$node" -o %t 2>/dev/null | head -n 1) || state=""
    case "$state" in
      idle | alloc | mix | comp)
        (timeout "${HPCTRAIN_PROBE_TIMEOUT:-120}" srun --mpi="${MPI_PLUGIN:-pmix}" --nodes=1 --ntasks=1 \
           --ntasks-per-node=1 --nodelist="$node" "$HPCTRAIN" doctor "$@" --size-mb 1 \
           > "$probes/$node.log" 2>&1
         echo $? > "$probes/$node.status") & ;;
      *) echo "hpctrain: not using $node: Slurm reports it ${state:-unknown}" > "$probes/$node.dropped" ;;
    esac
  done
  wait
  for node in "${nodes[@]}"; do
    if [ -f "$probes/$node.dropped" ]; then
      cat "$probes/$node.dropped" >&2
    elif [ "$(cat "$probes/$node.status")" = 0 ]; then
      echo "$node"
    else
      echo "hpctrain: not using $node: hpctrain doctor failed there (exit $(cat "$probes/$node.status")):" \
           "$(grep -m 1 'error' "$probes/$node.log" || tail -n 1 "$probes/$node.log")" >&2
    fi
  done
  rm -rf "$probes"
}

# Prints the value of `section.key` in `hpctrain train --print-config` output read from stdin.
hpctrain_config_value() {
  awk -v section="${1%%.*}" -v key="${1#*.}" \
    '/^\[/ { inside = ($0 == "[" section "]") } inside && $1 == key { sub(/^[^=]*= /, ""); print; exit }'
}

# The samples per optimizer step of the resolved CONFIG (train.global_batch, else WORLD ranks x
# train.batch_size x train.accum_steps) and its train.batch_size: "GLOBAL BATCH".
hpctrain_batches() {
  local config=$1 world=$2 global batch accumulation
  global=$(hpctrain_config_value train.global_batch <<< "$config")
  batch=$(hpctrain_config_value train.batch_size <<< "$config")
  accumulation=$(hpctrain_config_value train.accum_steps <<< "$config")
  [ "$global" -gt 0 ] || global=$((world * batch * accumulation))
  echo "$global $batch"
}

# The most of USABLE nodes that keep GLOBAL samples a step whole: GLOBAL must be a multiple of
# nodes x TASKS_PER_NODE x BATCH. One node always is when GLOBAL came from the whole allocation.
hpctrain_nodes_to_use() {
  local usable=$1 tasks_per_node=$2 global=$3 batch=$4 nodes
  for ((nodes = usable; nodes > 0; nodes--)); do
    if [ $((global % (nodes * tasks_per_node * batch))) -eq 0 ]; then
      echo "$nodes"
      return
    fi
  done
  echo 0
}

# The restarts so far, counted in RUN_DIR/restarts.log.
hpctrain_restarts_so_far() {
  [ -f "$1/restarts.log" ] || { echo 0; return; }
  grep -c . "$1/restarts.log" || true
}

# One restart, said on stderr and recorded in RUN_DIR/restarts.log. Usage: hpctrain_log_restart RUN_DIR TEXT...
hpctrain_log_restart() {
  local run_dir=$1
  shift
  mkdir -p "$run_dir"
  echo "hpctrain: $*" >&2
  echo "$(date -u +%FT%TZ) job ${SLURM_JOB_ID} $*" >> "$run_dir/restarts.log"
}

# After a failed training step: prints the relaunch, "NODES [OPTION...]" (the comma-separated nodes
# and what keeps the global batch on them), logging the restart; returns 1 when the restarts are
# spent and 2 when no node is usable. Usage: hpctrain_restart_plan STATUS SECONDS NODE... -- OPTIONS...
hpctrain_restart_plan() {
  local status=$1 seconds=$2 max=${HPCTRAIN_MAX_RESTARTS:-3}
  shift 2
  local -a all=()
  while [ "$1" != -- ]; do all+=("$1"); shift; done
  shift
  local config run_dir done_so_far tasks_per_node world
  config=$("$HPCTRAIN" train "$@" --print-config) ||
    { echo "hpctrain: error: $HPCTRAIN train --print-config failed; not restarting" >&2; return 1; }
  run_dir=$(hpctrain_config_value run.dir <<< "$config")
  done_so_far=$(hpctrain_restarts_so_far "$run_dir")
  if [ "$done_so_far" -ge "$max" ]; then
    echo "hpctrain: error: the training step failed with exit $status after $done_so_far restart(s)," \
         "the most HPCTRAIN_MAX_RESTARTS=$max allows; giving up (the ranks' logs: $run_dir/logs;" \
         "the restarts: $run_dir/restarts.log)" >&2
    return 1
  fi
  local reason="restart $((done_so_far + 1)) of $max: the training step failed with exit $status after $seconds s"
  tasks_per_node=$(hpctrain_tasks_per_node)
  world=$((${#all[@]} * tasks_per_node))
  local -a usable=()
  mapfile -t usable < <(hpctrain_usable_nodes "${all[@]}" -- "$@")
  local global batch nodes
  read -r global batch < <(hpctrain_batches "$config" "$world")
  nodes=$(hpctrain_nodes_to_use "${#usable[@]}" "$tasks_per_node" "$global" "$batch")
  if [ "$nodes" -eq 0 ]; then
    hpctrain_log_restart "$run_dir" "$reason; no node of ${all[*]} is usable: requeueing"
    return 2
  fi
  local -a kept=("${usable[@]:0:nodes}") dropped=()
  local node
  for node in "${all[@]}"; do
    [[ " ${kept[*]} " == *" $node "* ]] || dropped+=("$node")
  done
  local now=$((nodes * tasks_per_node))
  hpctrain_log_restart "$run_dir" "$reason; dropped: ${dropped[*]:-none}; relaunching on ${kept[*]}:" \
    "world $now (was $world), global batch $global, from the newest checkpoint"
  local joined
  joined=$(IFS=,; echo "${kept[*]}")
  if [ "$now" -eq "$world" ]; then echo "$joined"; else echo "$joined --train.global_batch=$global --train.accum_steps=1"; fi
}
