#!/usr/bin/env bash
# A real Slurm on this one machine for the tests: munge, slurmctld and one slurmd per "node", all
# from Debian's packages, with every file under DIR (no system configuration is touched).
#   tests/slurm/local_slurm.sh start DIR [NODES]   # NODES "nodes" (default 1) of 4 CPUs each
#   tests/slurm/local_slurm.sh stop DIR
# After start, client commands need SLURM_CONF=DIR/slurm.conf. Exits 77 with one "SKIP:" line
# when Slurm cannot run here (not installed, daemons that do not come up), so ctest reports a
# skip, never a silent pass. Two partitions: debug (default) and urgent, which preempts debug
# by requeueing its jobs.
set -euo pipefail

skip() { echo "SKIP: $*" >&2; exit 77; }

command=${1:?usage: local_slurm.sh start|stop DIR [NODES]}
dir=$(realpath -m "${2:?usage: local_slurm.sh start|stop DIR [NODES]}")
nodes=${3:-1}

stop() {
  for pid_file in "$dir"/run/slurmd-*.pid "$dir/run/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -f "$pid_file" ] || continue
    pid=$(cat "$pid_file")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pid_file"
  done
}

if [ "$command" = stop ]; then
  stop
  exit 0
fi
[ "$command" = start ] || { echo "usage: local_slurm.sh start|stop DIR [NODES]" >&2; exit 2; }

for tool in munged mungekey slurmctld slurmd sbatch srun scontrol sinfo; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (jobs/install-deps.sh installs Slurm and munge)"
done

host=$(hostname -s)
mkdir -p "$dir"/{munge,state,run,log,spool,tmp}
chmod 0755 "$dir" "$dir/munge"
[ -f "$dir/munge/munge.key" ] || mungekey --create --keyfile="$dir/munge/munge.key"
chmod 0600 "$dir/munge/munge.key"
munged --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
  --log-file="$dir/munge/munged.log" --pid-file="$dir/munge/munged.pid" \
  --seed-file="$dir/munge/munged.seed" || skip "munged did not start ($dir/munge/munged.log)"
munge -n -S "$dir/munge/munge.socket" | unmunge -S "$dir/munge/munge.socket" >/dev/null ||
  skip "munge does not authenticate ($dir/munge/munged.log)"

# One node: named after the host. Several: n1, n2, ... on ports 6818, 6819, ... (Debian's Slurm
# is built with MULTIPLE_SLURMD), all on this host.
node_lines=""
node_names=()
if [ "$nodes" -eq 1 ]; then
  node_names=("$host")
  node_lines="NodeName=$host NodeAddr=127.0.0.1 CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=4096 State=UNKNOWN"
else
  for i in $(seq "$nodes"); do
    node_names+=("n$i")
    node_lines+="NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((6817 + i)) CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=4096 State=UNKNOWN"$'\n'
  done
fi
for node in "${node_names[@]}"; do mkdir -p "$dir/spool/$node" "$dir/tmp/$node"; done

# Fast scheduling and a short credential lifetime make a requeued job restart within seconds.
cat > "$dir/slurm.conf" <<CONF
ClusterName=hpctrain-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.log
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
MailProg=/bin/true
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=300
$node_lines
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=10
PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
CONF

export SLURM_CONF="$dir/slurm.conf"
slurmctld -c -f "$SLURM_CONF" || skip "slurmctld did not start ($dir/log/slurmctld.log)"
for node in "${node_names[@]}"; do
  slurmd -f "$SLURM_CONF" -N "$node" || skip "slurmd $node did not start ($dir/log/slurmd-$node.log)"
done
for _ in $(seq 100); do
  idle=$(sinfo -h -N -o '%t' 2>/dev/null | grep -c '^idle' || true)
  [ "$idle" -ge "$nodes" ] && { echo "local Slurm up: ${node_names[*]} (SLURM_CONF=$SLURM_CONF)"; exit 0; }
  sleep 0.2
done
skip "the Slurm nodes did not become idle within 20 s: $(sinfo -h -N -o '%N %t' 2>&1 | tr '\n' ' ')"
