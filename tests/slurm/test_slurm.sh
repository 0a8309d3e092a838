# shellcheck shell=bash
# shellcheck disable=SC2154  # bin and source_dir are set by the test that sources this
# Sourced by tests/slurm/*_test.sh once they have set `bin` (hpctrain) and `source_dir`:
#   start_test_slurm NAME NODES
# starts a real Slurm of NODES "nodes" (tests/slurm/local_slurm.sh) under a new $work, exports
# what its jobs need, cds to the repository root (the templates are submitted from there), writes
# 1200 Fashion-MNIST samples in 2 shards to $work/data, and at exit cancels the jobs, stops the
# daemons and removes $work (kept with KEEP_WORK=1). Exits 77 (a ctest skip) when Slurm cannot
# start. `fail MESSAGE` prints the jobs' outputs and exits 1.

fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/job-*.out; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done >&2
  exit 1
}

stop_test_slurm() {
  # Jobs first: with proctrack/linuxproc their ranks would outlive the daemons.
  [ -f "$cluster/slurm.conf" ] && SLURM_CONF="$cluster/slurm.conf" scancel --quiet --user="$(id -un)" 2>/dev/null
  [ -n "${waiter:-}" ] && kill "$waiter" 2>/dev/null
  sleep 1
  bash "$source_dir/tests/slurm/local_slurm.sh" stop "$cluster"
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}

start_test_slurm() {
  work=$(mktemp -d "/tmp/hpctrain-$1.XXXXXX")
  chmod 0755 "$work"  # munged wants every directory above its socket searchable
  cluster="$work/slurm"
  trap stop_test_slurm EXIT
  cd "$source_dir" || exit 1
  bash "$source_dir/tests/slurm/local_slurm.sh" start "$cluster" "$2" || exit $?
  export SLURM_CONF="$cluster/slurm.conf"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # Several "nodes" on one host must not share Open MPI's memory segments.
  [ "$2" -eq 1 ] || export OMPI_MCA_btl=self,tcp
  export HPCTRAIN="$bin"
  "$bin" prepare fashion-mnist --source /usr/share/datasets/fashion-mnist --out "$work/data" --limit 1200 \
    --shards 2 > /dev/null || fail "prepare"
}
