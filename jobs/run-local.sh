#!/usr/bin/env bash
# Runs hpctrain on this machine under Open MPI's mpirun, with as many ranks as the machine suits:
#   jobs/run-local.sh [--np N] [--dry-run] [--binary PATH] [--max-restarts N] [--] COMMAND ARGS...
#   jobs/run-local.sh --interactive [--binary PATH]
#   jobs/run-local.sh train --config configs/fashion_cnn.ini --train.epochs=2
#   jobs/run-local.sh --np 1 eval --checkpoint runs/default/checkpoints/ckpt-938.h5 --config runs/default/config.ini
#   jobs/run-local.sh --dry-run train --config configs/mlp.ini    # print the command, run nothing
# COMMAND ARGS... go to hpctrain unchanged (everything from the first word that is not one of the
# options above, or everything after `--`).
#
# --interactive asks, in a terminal, for a config of configs/, the ranks (default: the choice
# below), learning-rate scaling, precision and run directory, prints the mpirun line and runs it
# when confirmed (jobs/lib/run-local-ask.sh). Without a terminal it refuses (exit 2).
#
# --max-restarts N (train only; default 0): when the run fails — any exit but 0, 75 (stopped by a
# signal, with a checkpoint) and 2 or 3 (a config or data error, which a restart repeats) — start
# it again, up to N times: it resumes from its newest checkpoint (ckpt.resume=auto) with the same
# ranks and global batch. Each restart is logged on stderr as `run-local: restart K of N: ...`
# with the exit code and how long the run lasted; after the Nth the last exit code is returned
# with one line saying so. SIGUSR1, SIGTERM and SIGINT are passed on to mpirun.
#
# Ranks (-np), from the GPUs and the logical CPUs (cores) this shell may use:
#   GPUs:    one rank per GPU (nvidia-smi's list, or the entries of CUDA_VISIBLE_DEVICES when set,
#            up to the first negative one); ranks are not bound (--bind-to none).
#   no GPU:  min(cores, 4) ranks: a few replicas, each with a useful share of the cores.
#   --np N:  N ranks either way.
#   Each rank gets T = max(1, cores / ranks) cores: `--train.threads=T` is inserted after the
#   command for train and eval (unless ARGS already set train.threads), and on CPU each rank is
#   bound to T logical CPUs of its own (--use-hwthread-cpus --map-by slot:PE=T --bind-to hwthread).
#   More ranks than cores adds --oversubscribe and --bind-to none instead.
# Environment set for mpirun (and shown in the printed line): as root, OMPI_ALLOW_RUN_AS_ROOT=1
# OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; unless already set, OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
# (fast one-node start-up, as jobs/env.sh) and, with GPUs, NCCL_DEBUG=WARN.
# The binary: --binary PATH, else $HPCTRAIN, else build/release/src/hpctrain, else
# build/dev/src/hpctrain (both under the repository root). Relative paths in ARGS stay relative to
# the current directory.
# Before running, the command line is printed to stderr as `run-local: <line>`; --dry-run prints
# it to stdout instead and exits 0. The line is shell-quoted: it can be pasted into a shell.
# mpirun is exec'ed, so signals reach it directly (SIGUSR1 to mpirun: checkpoint and exit 75).
# Exit codes: 2 for a usage error, no binary or no mpirun; otherwise mpirun's (docs/exit-codes.md).
# Test hooks: RUN_LOCAL_GPUS=G pretends G GPUs (nvidia-smi is not asked), RUN_LOCAL_CORES=C
# pretends C cores (a real run still binds each rank to CPUs that must exist).
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
die() { echo "run-local: error: $*" >&2; exit 2; }
is_count() { [[ "$1" =~ ^[0-9]{1,6}$ ]]; }  # decimal, small enough for $((...))

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
np="" dry_run=false binary="" interactive=false max_restarts=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --dry-run) dry_run=true; shift ;;
    --interactive) interactive=true; shift ;;
    --np|--binary|--max-restarts)
      [ $# -ge 2 ] || die "$1 needs a value"
      case "$1" in --np) np=$2 ;; --binary) binary=$2 ;; *) max_restarts=$2 ;; esac
      shift 2 ;;
    --np=*) np=${1#--np=}; shift ;;
    --max-restarts=*) max_restarts=${1#--max-restarts=}; shift ;;
    --binary=*) binary=${1#--binary=}; shift ;;
    --) shift; break ;;
    -*) die "unknown option '$1' (see jobs/run-local.sh --help)" ;;
    *) break ;;
  esac
done
if $interactive; then
  { [ -t 0 ] && [ -t 1 ]; } || die "--interactive asks on a terminal, and this has none; give the command instead (jobs/run-local.sh train --config configs/fashion_cnn.ini)"
  [ $# -eq 0 ] || die "--interactive asks for the command: give no COMMAND ARGS"
  [ -z "$np" ] || die "--interactive asks for the ranks: leave out --np"
fi
[ $# -gt 0 ] || $interactive || die "no hpctrain command given (e.g. jobs/run-local.sh train --config configs/fashion_cnn.ini)"
[ -z "$np" ] || { is_count "$np" && [ "$np" -ge 1 ]; } || die "--np wants a positive integer, not '$np'"
[ -z "$np" ] || np=$((10#$np))
is_count "$max_restarts" || die "--max-restarts wants a count (0 or more), not '$max_restarts'"
max_restarts=$((10#$max_restarts))
[ "$max_restarts" -eq 0 ] || [ "${1:-train}" = train ] ||
  die "--max-restarts restarts training runs (train), not '$1'"

# The binary, as an absolute path so the printed line works from anywhere.
if [ -z "$binary" ]; then
  binary=${HPCTRAIN:-}
  for candidate in "$repo/build/release/src/hpctrain" "$repo/build/dev/src/hpctrain"; do
    [ -n "$binary" ] || [ ! -x "$candidate" ] || binary=$candidate
  done
  [ -n "$binary" ] || die "no hpctrain binary: build one (jobs/build.sh), or pass --binary PATH or set HPCTRAIN"
fi
{ [ -f "$binary" ] && [ -x "$binary" ]; } || die "hpctrain binary '$binary' is not an executable file"
binary="$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")"
command -v mpirun >/dev/null || die "mpirun not found in PATH (install openmpi-bin: jobs/install-deps.sh)"

# GPUs and cores.
if [ -n "${RUN_LOCAL_GPUS:-}" ]; then
  is_count "$RUN_LOCAL_GPUS" || die "RUN_LOCAL_GPUS wants a number, not '$RUN_LOCAL_GPUS'"
  gpus=$((10#$RUN_LOCAL_GPUS))
elif command -v nvidia-smi >/dev/null; then
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    gpus=0
    IFS=, read -ra visible <<< "$CUDA_VISIBLE_DEVICES"
    for device in "${visible[@]}"; do
      device=${device// /}
      { [ -n "$device" ] && [ "${device:0:1}" != - ]; } || break  # CUDA stops at an invalid entry
      gpus=$((gpus + 1))
    done
  else
    gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c '[0-9]' || true)
  fi
else
  gpus=0
fi
if [ -n "${RUN_LOCAL_CORES:-}" ]; then
  { is_count "$RUN_LOCAL_CORES" && [ "$RUN_LOCAL_CORES" -ge 1 ]; } ||
    die "RUN_LOCAL_CORES wants a positive number, not '$RUN_LOCAL_CORES'"
  cores=$((10#$RUN_LOCAL_CORES))
else
  cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # the CPUs this process may run on
fi

if [ -z "$np" ]; then
  if [ "$gpus" -gt 0 ]; then np=$gpus; else np=$((cores < 4 ? cores : 4)); fi
fi
if $interactive; then
  # shellcheck source=jobs/lib/run-local-ask.sh
  source "$repo/jobs/lib/run-local-ask.sh"
  ask_for_run
  set -- "${run_args[@]}"
fi
threads=$((cores / np > 1 ? cores / np : 1))

mpi_args=(-np "$np" --use-hwthread-cpus)
if [ "$np" -gt "$cores" ]; then
  mpi_args+=(--oversubscribe --bind-to none)
elif [ "$gpus" -gt 0 ]; then
  mpi_args+=(--bind-to none)
else
  mpi_args+=(--map-by "slot:PE=$threads" --bind-to hwthread)
fi

hpctrain_args=("$1"); shift
if [ "${hpctrain_args[0]}" = train ] || [ "${hpctrain_args[0]}" = eval ]; then
  set_threads=true
  for arg in "$@"; do [[ "$arg" != --train.threads* ]] || set_threads=false; done
  ! $set_threads || hpctrain_args+=("--train.threads=$threads")
fi
hpctrain_args+=("$@")

env_args=()
[ "$(id -u)" -ne 0 ] || env_args+=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
[ -n "${OMPI_MCA_pml+set}" ] || env_args+=(OMPI_MCA_pml=ob1)
[ -n "${OMPI_MCA_btl+set}" ] || env_args+=("OMPI_MCA_btl=self,vader")
[ "$gpus" -eq 0 ] || [ -n "${NCCL_DEBUG+set}" ] || env_args+=(NCCL_DEBUG=WARN)

# One word per argument, quoted only where the shell needs it.
quote() { if [[ "$1" =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then printf '%s' "$1"; else printf '%s' "${1@Q}"; fi; }
line=""
for word in "${env_args[@]}" mpirun "${mpi_args[@]}" "$binary" "${hpctrain_args[@]}"; do
  line+="${line:+ }$(quote "$word")"
done

if $dry_run; then
  printf '%s\n' "$line"
  exit 0
fi
if $interactive; then
  confirm "$line" || { echo "run-local: not run"; exit 0; }
else
  echo "run-local: $line" >&2
fi
[ ${#env_args[@]} -eq 0 ] || export "${env_args[@]}"
[ "$max_restarts" -gt 0 ] || exec mpirun "${mpi_args[@]}" "$binary" "${hpctrain_args[@]}"
# shellcheck source=jobs/lib/restarts.sh
source "$repo/jobs/lib/restarts.sh"
run_with_restarts "$max_restarts" mpirun "${mpi_args[@]}" "$binary" "${hpctrain_args[@]}"
