#!/usr/bin/env bash
# ctest `multinode_train` (label multinode): slurm/multinode.sbatch, run as is with LAUNCHER=mpirun,
# across 2 "nodes" of 2 ranks each made on this machine with network namespaces
# (tests/multinode/local_nodes.sh).
#  1. the banner and per-rank lines show 4 ranks on 2 hosts, node-local ranks 0 and 1 on each and
#     the rank -> host placement of --map-by ppr:2:node;
#  2. `hpctrain doctor` across the same nodes passes every check and tabulates the placement;
#  3. the final checkpoint equals, bit for bit (/model /optim /sched /rng), that of the same training
#     with 4 ranks on one node: the node layout and the TCP transport between nodes change nothing.
# Exits 77 (a ctest skip, with a SKIP: line) only when the namespaces cannot be made here.
#   tests/multinode/multinode_test.sh HPCTRAIN_BINARY SOURCE_DIR
set -euo pipefail

usage="usage: multinode_test.sh HPCTRAIN_BINARY SOURCE_DIR"
bin=$(realpath "${1:?$usage}")
source_dir=$(realpath "${2:?$usage}")
started=$SECONDS
work=$(mktemp -d /tmp/hpctrain-multinode-test.XXXXXX)
nodes="$work/nodes"
cleanup() {
  bash "$source_dir/tests/multinode/local_nodes.sh" stop "$nodes" || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done >&2
  exit 1
}

# A Slurm job around ctest must not leak into either mpirun: the multi-node one would take its
# allocation for the nodes, the single-node one might spread over it.
while read -r var; do unset "$var"; done < <(compgen -e | grep '^SLURM_' || true)

bash "$source_dir/tests/multinode/local_nodes.sh" start "$nodes" 2 2 > /dev/null || exit $?

"$bin" prepare fashion-mnist --source /usr/share/datasets/fashion-mnist --out "$work/data" --limit 1200 \
  --shards 2 > "$work/prepare.log" 2>&1 || fail "prepare"

# Both runs: 10 AdamW steps of 4 ranks x 16 samples, every rank logging at debug level.
train_args=(--data.path="$work/data" --train.threads=1 --data.eval_split= --train.batch_size=16
            --train.epochs=1 --train.max_steps=10 --log.level=debug --log.all_ranks=true --optim.name=adamw)
# Open MPI everywhere: 4 ranks share 2 real cores, which it cannot see through the namespaces,
# so no binding (it would pin a rank of every node to core 0) and yield while waiting (or
# collectives get 10-30x slower).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_mpi_yield_when_idle=1

# 1. Two nodes: the template itself, started in htnode1, with mpirun told through the environment
# what the sbatch line cannot say: the hostfile, the ssh stand-in, and that the fake SLURM_JOB_ID
# is no allocation to launch into (plm=rsh, no slurm ras). TCP is the only way between the nodes.
# SLURM_JOB_NUM_NODES and SLURM_NTASKS are left out, as the template only prints them.
# shellcheck disable=SC2054  # the commas are in btl's value
multi_env=(LAUNCHER=mpirun HPCTRAIN="$bin" CONFIG="$source_dir/configs/fashion_cnn.ini"
           SLURM_SUBMIT_DIR="$source_dir" SLURM_JOB_ID=424242 SLURM_NTASKS_PER_NODE=2
           SLURM_GPUS_PER_NODE=0 RUN_DIR="$work/multi"
           OMPI_MCA_orte_default_hostfile="$nodes/hostfile" OMPI_MCA_plm_rsh_agent="$nodes/agent"
           OMPI_MCA_plm=rsh OMPI_MCA_ras=^slurm OMPI_MCA_btl=self,vader,tcp)
cd "$source_dir"
timeout -k 5 60 "$nodes/run" htnode1 env "${multi_env[@]}" \
  bash "$source_dir/slurm/multinode.sbatch" "${train_args[@]}" > "$work/multi.log" 2>&1 ||
  fail "the two-node run failed (exit $?)"
log="$work/multi.log"
grep -qF "2 task(s) each: mpirun --map-by ppr:2:node $bin train --config" "$log" ||
  fail "the template's launch line is not in the log"
banners=$(grep -c "world 4 rank(s) on 2 node(s) \[htnode1, htnode2\], 2 per node" "$log" || true)
[ "$banners" -eq 4 ] || fail "expected 4 ranks to report 'world 4 rank(s) on 2 node(s) [htnode1, htnode2]', got $banners"
# rank R local rank L/2 node N host H: ranks 0,1 on htnode1 and 2,3 on htnode2 (ppr:2:node fills
# the hostfile's nodes in order), each line printed by the rank it is about, on that host.
for rank in 0 1 2 3; do
  node=$((rank / 2))
  host=htnode$((node + 1))
  grep -q "^\[$rank/4 $host\] rank $rank local rank $((rank % 2))/2 node $node host $host " "$log" ||
    fail "no line 'rank $rank local rank $((rank % 2))/2 node $node host $host' from rank $rank on $host"
done
[ "$(grep -c "\] done: 10 steps" "$log" || true)" -eq 4 ] || fail "not every rank of the two-node run finished 10 steps"
[ -f "$work/multi/checkpoints/ckpt-10.h5" ] || fail "the two-node run left no checkpoints/ckpt-10.h5"

# 2. hpctrain doctor across the two nodes, launched the way the template launches training.
timeout -k 5 60 "$nodes/run" htnode1 env "${multi_env[@]}" mpirun --map-by ppr:2:node "$bin" doctor \
  --data.path="$work/data" --run.dir="$work/doctor-run" --size-mb 4 > "$work/doctor.log" 2>&1 ||
  fail "hpctrain doctor failed across two nodes (exit $?)"
grep -q "world      PASS   4 rank(s) on 2 node(s)" "$work/doctor.log" || fail "doctor did not see 4 ranks on 2 nodes"
grep -q "doctor: 6 checks passed" "$work/doctor.log" || fail "doctor: not every check passed"
for rank in 0 1 2 3; do
  grep -Eq "^$rank +htnode$((rank / 2 + 1)) +$((rank % 2))/2 +cpu" "$work/doctor.log" ||
    fail "doctor's table does not place rank $rank on htnode$((rank / 2 + 1)) as local rank $((rank % 2))/2"
done

# 3. One node: the same training with all 4 ranks on this machine, outside the namespaces.
timeout -k 5 60 env OMPI_MCA_btl=self,vader mpirun --oversubscribe -np 4 "$bin" train \
  --config "$source_dir/configs/fashion_cnn.ini" --run.dir="$work/single" --dist.device=cpu \
  "${train_args[@]}" > "$work/single.log" 2>&1 || fail "the one-node run failed (exit $?)"
[ -f "$work/single/checkpoints/ckpt-10.h5" ] || fail "the one-node run left no checkpoints/ckpt-10.h5"
for group in /model /optim /sched /rng; do
  h5diff -q "$work/multi/checkpoints/ckpt-10.h5" "$work/single/checkpoints/ckpt-10.h5" "$group" "$group" ||
    fail "$group differs between the two-node and the one-node run"
done
echo "multinode_test: slurm/multinode.sbatch ran 4 ranks on 2 nodes (htnode1: ranks 0,1; htnode2: ranks 2,3;" \
     "local ranks 0,1 on each), and its checkpoint equals the one-node run's bit for bit" \
     "($((SECONDS - started)) s)"
