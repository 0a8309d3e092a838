#!/usr/bin/env bash
# ctest `slurm_launch` (label unit): slurm/launch.sh's decisions after a failed training step, with
# stand-ins for srun, mpirun, sinfo, scontrol and hpctrain that follow a script of exit codes and
# node states (the real Slurm runs are tests/slurm/slurm_restart_test.sh). Checked: which nodes
# a relaunch uses (Slurm's view, the doctor, the largest node count that keeps the global batch
# whole) and with which options; the requeue when no node is usable; no restart after exit 2;
# the limit counted across requeues in restarts.log; a refused requeue ends with 75.
#   tests/slurm/launch_test.sh SOURCE_DIR
set -uo pipefail

source_dir=$(realpath "${1:?usage: launch_test.sh SOURCE_DIR}")
work=$(mktemp -d /tmp/hpctrain-launch-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; echo "--- output"; cat "$work/out" 2>/dev/null; exit 1; }

# The stand-ins. The training step's exit codes are taken in turn from $work/exits; a node's
# Slurm state is $work/state-NODE (default alloc); its doctor's exit code $work/doctor-NODE (0).
mkdir "$work/bin"
cat > "$work/bin/scontrol" <<'EOF'
#!/usr/bin/env bash
case "$1 $2" in
  "show hostnames") tr ',' '\n' <<< "$FAKE_NODES" ;;
  "requeue "*) echo "requeue $2" >> "$FAKE_DIR/calls"; exit "${FAKE_REQUEUE_STATUS:-0}" ;;
esac
EOF
cat > "$work/bin/sinfo" <<'EOF'
#!/usr/bin/env bash
node=$(sed -n 's/.* -n \([^ ]*\) .*/\1/p' <<< " $* ")
cat "$FAKE_DIR/state-$node" 2>/dev/null || echo alloc
EOF
cat > "$work/bin/srun" <<'EOF'
#!/usr/bin/env bash
if [[ " $* " == *" doctor "* ]]; then
  node=$(sed -n 's/.*--nodelist=\([^ ]*\).*/\1/p' <<< "$*")
  exit "$(cat "$FAKE_DIR/doctor-$node" 2>/dev/null || echo 0)"
fi
echo "srun $*" >> "$FAKE_DIR/calls"
status=$(head -n 1 "$FAKE_DIR/exits")
sed -i 1d "$FAKE_DIR/exits"
exit "$status"
EOF
sed 's/"srun \$\*"/"mpirun $*"/' "$work/bin/srun" > "$work/bin/mpirun"
cat > "$work/bin/hpctrain" <<'EOF'
#!/usr/bin/env bash
# `train OPTIONS --print-config`: the options this test uses, resolved as hpctrain would print them.
dir=runs/default batch=16 global=0
for arg; do
  case "$arg" in
    --run.dir=*) dir=${arg#*=} ;;
    --train.batch_size=*) batch=${arg#*=} ;;
    --train.global_batch=*) global=${arg#*=} ;;
  esac
done
printf '[run]\ndir = %s\n\n[train]\nbatch_size = %s\naccum_steps = 1\nglobal_batch = %s\n' "$dir" "$batch" "$global"
EOF
chmod +x "$work/bin/"*

# Runs hpctrain_launch for a job on NODES (comma-separated) with TASKS per node, the training
# step exiting with each of EXITS in turn; prints the launcher's calls. Usage: launch NODES TASKS "EXITS" OPTIONS...
launch() {
  local nodes=$1 tasks=$2 exits=$3
  shift 3
  rm -f "$work/calls"
  tr ' ' '\n' <<< "$exits" > "$work/exits"
  (
    cd "$source_dir" || exit 1
    export PATH="$work/bin:$PATH" FAKE_DIR="$work" FAKE_NODES="$nodes" HPCTRAIN="$work/bin/hpctrain"
    export SLURM_JOB_ID=7 SLURM_JOB_NODELIST="$nodes" SLURM_NTASKS_PER_NODE="$tasks"
    SLURM_JOB_NUM_NODES=$(tr ',' '\n' <<< "$nodes" | grep -c .)
    export SLURM_JOB_NUM_NODES
    source slurm/launch.sh
    hpctrain_launch train --run.dir="$work/run dir" "$@"
  ) > "$work/out" 2>&1
}

# 1. 4 nodes x 2 tasks x 16 = 128 a step, n2 drained: of the 3 usable nodes 2 keep 128 whole (3 x 2
#    x 16 = 96 does not divide it), so the relaunch is on n1,n3 at world 4 with the global batch set.
echo drain > "$work/state-n2"
launch n1,n2,n3,n4 2 "137 0"
status=$?
[ "$status" -eq 0 ] || fail "1: exit $status"
grep -q "not using n2: Slurm reports it drain" "$work/out" || fail "1: n2's state not named"
grep -q "restart 1 of 3: the training step failed with exit 137 after [0-9]* s; dropped: n2 n4; relaunching on n1 n3: world 4 (was 8), global batch 128" \
  "$work/run dir/restarts.log" || fail "1: restarts.log: $(cat "$work/run dir/restarts.log")"
sed -n 2p "$work/calls" | grep -q -- "--nodelist=n1,n3 --nodes=2 --ntasks=4 --ntasks-per-node=2 .* --train.global_batch=128 --train.accum_steps=1$" ||
  fail "1: relaunch: $(sed -n 2p "$work/calls")"
rm -rf "$work"/state-* "$work/run dir"

# 2. 3 nodes, n3's doctor failing, a global batch of 96 set by the user: 2 nodes (64 a micro-batch)
#    do not divide it, 1 does.
echo 5 > "$work/doctor-n3"
launch n1,n2,n3 2 "1 0" --train.global_batch=96
grep -q "not using n3: hpctrain doctor failed there (exit 5)" "$work/out" || fail "2: n3's doctor not named"
grep -q "dropped: n2 n3; relaunching on n1: world 2 (was 6), global batch 96" "$work/out" || fail "2: $(cat "$work/out")"
rm -rf "$work"/doctor-* "$work/run dir"

# 3. No usable node: the job requeues itself; the restart is counted.
echo "down*" > "$work/state-n1"
launch n1 2 "137"
status=$?
[ "$status" -eq 0 ] || fail "3: exit $status"
grep -q "no node of n1 is usable: requeueing" "$work/run dir/restarts.log" || fail "3: no requeue line"
grep -q "^requeue 7$" "$work/calls" || fail "3: scontrol requeue not called"
rm -f "$work/state-n1"

# 4. The limit counts the restarts of earlier runs of the job (restarts.log holds 3's): two more,
#    then it gives up with the last exit code.
launch n1 2 "134 134 134"
status=$?
[ "$status" -eq 134 ] || fail "4: exit $status"
grep -q "restart 3 of 3" "$work/out" || fail "4: the third restart missing"
grep -q "error: the training step failed with exit 134 after 3 restart(s), the most HPCTRAIN_MAX_RESTARTS=3 allows; giving up" \
  "$work/out" || fail "4: no giving-up line"
rm -rf "$work/run dir"

# 5. A config error is not restarted; 75 requeues, and a refused requeue ends with 75.
launch n1 2 "2"
status=$?
[ "$status" -eq 2 ] && grep -q "not restarted: exit 2 is a config or data error" "$work/out" || fail "5: exit 2"
[ "$(grep -c . "$work/calls")" -eq 1 ] || fail "5: exit 2 was relaunched"
FAKE_REQUEUE_STATUS=1 launch n1 2 "75"
status=$?
[ "$status" -eq 75 ] && grep -q "scontrol requeue failed" "$work/out" || fail "5: refused requeue: exit $status"

# 6. mpirun on a subset: the hosts with their slots.
echo drain > "$work/state-n2"
LAUNCHER=mpirun launch n1,n2 2 "137 0"
sed -n 2p "$work/calls" | grep -q -- "^mpirun --map-by ppr:2:node --host n1:2 " || fail "6: $(sed -n 2p "$work/calls")"

echo "launch_test: relaunch nodes and options, requeue without usable nodes, the limit across requeues," \
     "exit 2 and a refused requeue, mpirun's hosts"
