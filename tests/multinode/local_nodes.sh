#!/usr/bin/env bash
# Several MPI "nodes" on this one machine for the tests: each node is a network namespace with its
# own host name and address, so Open MPI sees separate hosts (node-local ranks, TCP between nodes,
# one daemon per node). Needs root.
#   tests/multinode/local_nodes.sh start DIR N [SLOTS]   # nodes htnode1..htnodeN, SLOTS each (2)
#   tests/multinode/local_nodes.sh stop DIR
# start writes into DIR:
#   hosts     every node's address and name (bind-mounted on /etc/hosts inside the nodes, so
#             mpirun resolves the names without DNS; the real /etc/hosts is never touched)
#   hostfile  `htnodeX slots=SLOTS` per node, for mpirun
#   agent     the ssh stand-in for mpirun (plm_rsh_agent): `agent HOST CMD...` runs the shell line
#             CMD on HOST, as ssh would
#   run       `run NODE CMD...` runs the command CMD (not a shell line) on NODE, e.g. mpirun
# The names are fixed (one set of nodes at a time), so start first removes whatever a killed
# earlier run left behind. The nodes are wired to a bridge that lives in its own namespace
# (htnet): nothing is added to this machine's own network, and nothing routes out of 10.251.0.0/24.
# Exits 77 with one "SKIP:" line when namespaces cannot be made here, so ctest reports a skip.
set -euo pipefail

usage="usage: local_nodes.sh start DIR N [SLOTS] | stop DIR"
command=${1:?$usage}
dir=$(realpath -m "${2:?$usage}")
prefix=htnode
net=htnet
subnet=10.251.0

# Every namespace of ours, whether from this DIR or a stale one from an earlier run.
our_namespaces() {
  command -v ip >/dev/null || return 0
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^(${prefix}[0-9]+|${net})$" || true
}

# Processes still in a namespace keep it (and its links) alive after `ip netns del`: end them
# first. TERM, then KILL after 2 s: hpctrain ranks answer TERM with a checkpoint and exit 75,
# which takes a step or so.
teardown() {
  local ns pids
  for ns in $(our_namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] || continue
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 20); do
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [ -n "$pids" ] || break
      sleep 0.1
    done
    [ -n "$pids" ] || continue
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    for _ in $(seq 20); do [ -z "$(ip netns pids "$ns" 2>/dev/null || true)" ] && break; sleep 0.1; done
  done
  # Deleting a node's namespace deletes its veth pair; deleting htnet deletes the bridge.
  for ns in $(our_namespaces); do ip netns del "$ns" 2>/dev/null || true; done
  for _ in $(seq 20); do [ -z "$(our_namespaces)" ] && return 0; sleep 0.1; done
  echo "local_nodes: namespaces left behind: $(our_namespaces | tr '\n' ' ')" >&2
  return 1
}

skip() {
  echo "SKIP: $*" >&2
  teardown >/dev/null 2>&1 || true
  exit 77
}

if [ "$command" = stop ]; then
  teardown
  exit 0
fi
[ "$command" = start ] || { echo "$usage" >&2; exit 2; }
nodes=${3:?$usage}
slots=${4:-2}
[[ "$nodes" =~ ^[1-9][0-9]{0,2}$ && "$nodes" -le 200 ]] || { echo "local_nodes: N must be 1..200" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
for tool in ip unshare mount hostname; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done

teardown || exit 1
mkdir -p "$dir"

# IPv6 off in every namespace before any link exists, so no link-local addresses appear: mpirun
# would otherwise offer them as routes between the nodes.
ipv6_off() {
  # shellcheck disable=SC2016  # expanded inside the namespace
  ip netns exec "$1" sh -c 'for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 \
    /proc/sys/net/ipv6/conf/default/disable_ipv6; do [ ! -e "$f" ] || echo 1 > "$f"; done'
}

err=$(ip netns add "$net" 2>&1) || skip "the kernel refuses to create a network namespace: $err"
ipv6_off "$net"
err=$(ip -n "$net" link add br0 type bridge 2>&1) || skip "the kernel refuses to create a bridge: $err"
ip -n "$net" link set br0 up

: > "$dir/nodes"
: > "$dir/hostfile"
echo "127.0.0.1 localhost" > "$dir/hosts"
for i in $(seq "$nodes"); do
  node=$prefix$i
  err=$(ip netns add "$node" 2>&1) || skip "the kernel refuses to create namespace $node: $err"
  ipv6_off "$node"
  ip -n "$node" link set lo up
  err=$(ip -n "$node" link add eth0 type veth peer name "$node" netns "$net" 2>&1) ||
    skip "the kernel refuses to create a veth pair: $err"
  ip -n "$net" link set "$node" master br0 up
  ip -n "$node" addr add "$subnet.$i/24" dev eth0
  ip -n "$node" link set eth0 up
  echo "$node" >> "$dir/nodes"
  echo "$node slots=$slots" >> "$dir/hostfile"
  echo "$subnet.$i $node" >> "$dir/hosts"
done

# Both wrappers give the process its node's host name (own UTS namespace) and hosts file (bind
# mount in the private mount namespace that `ip netns exec` makes). Two nodes with one host name
# would crash Open MPI's shared-memory transport.
cat > "$dir/agent" <<AGENT
#!/bin/sh
# ssh stand-in for mpirun (plm_rsh_agent): agent HOST CMD... runs the shell line "CMD..." on HOST.
host=\$1
shift
grep -qx -- "\$host" "$dir/nodes" || { echo "agent: unknown host '\$host'" >&2; exit 255; }
exec ip netns exec "\$host" unshare --uts -- \\
  sh -c 'hostname "\$1" && mount --bind "\$2" /etc/hosts && exec sh -c "\$3"' node "\$host" "$dir/hosts" "\$*"
AGENT
cat > "$dir/run" <<RUN
#!/bin/sh
# run NODE CMD...: runs the command CMD... (argv, no shell line) on NODE.
host=\$1
shift
grep -qx -- "\$host" "$dir/nodes" || { echo "run: unknown node '\$host'" >&2; exit 255; }
exec ip netns exec "\$host" unshare --uts -- \\
  sh -c 'hostname "\$1" && mount --bind "\$2" /etc/hosts && shift 2 && exec "\$@"' node "\$host" "$dir/hosts" "\$@"
RUN
chmod 0755 "$dir/agent" "$dir/run"

err=$(ip netns exec "${prefix}1" unshare --uts -- true 2>&1) || skip "the kernel refuses a UTS namespace: $err"
# A wrapper that fails from here on is a bug, not a skip.
# shellcheck disable=SC2016  # expanded inside the node
got=$("$dir/run" "${prefix}1" sh -c 'echo "$(hostname) $(getent hosts '"$prefix$nodes"' | cut -d" " -f1)"')
[ "$got" = "${prefix}1 $subnet.$nodes" ] || { echo "local_nodes: node self-check failed: '$got'" >&2; teardown; exit 1; }
if [ "$nodes" -gt 1 ]; then
  # A refused TCP connection (nothing listens on port 9) proves the packets got there and back.
  probe=$("$dir/run" "${prefix}1" timeout 5 bash -c "exec 3<>/dev/tcp/$prefix$nodes/9" 2>&1 || true)
  [[ "$probe" == *"Connection refused"* ]] || {
    echo "local_nodes: ${prefix}1 cannot reach $prefix$nodes: $probe" >&2; teardown; exit 1; }
fi
echo "local nodes up: $(tr '\n' ' ' < "$dir/nodes")($subnet.0/24, $slots slot(s) each; $dir)"
