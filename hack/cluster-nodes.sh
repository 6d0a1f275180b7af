# Sourced by hack/cluster: nodes 2..N of `hack/cluster up --nodes N`, each a node
# "container" as kind makes them, without Docker: its own network namespace
# (nfsrdma-nK, an address NODES_NET.K on the bridge $NODES_BRIDGE that joins the nodes
# and this host), and, inside it, its own PID, mount, UTS, IPC and cgroup namespaces
# whose init is hack/cluster-node; its own containerd, kubelet and kube-proxy with their
# own state, sockets and pod CIDR (POD_NET.K.0/24). Node 1 is this host.
#
# Routing: this host routes between the nodes (POD_NET.K.0/24 via NODES_NET.K); a node
# routes this host's address, the Service range and every pod range to this host; pods
# route every pod range and the nodes' addresses (host-network pods) to their node. No
# node and no pod has a default route: nothing leaves the machine.

NODES_BRIDGE=nfsrdma-nodes NODES_NET=10.87.0 POD_NET=10.88

node_name() { echo "$NODE-worker$([ "$1" -gt 2 ] && echo $(($1 - 1)))"; }
node_dir() { echo "$CLUSTER_DIR/nodes/$1"; }
node_run() { echo "$CLUSTER_DIR/nodes/$1/run"; } # not under /run: the node has its own /run
node_netns() { echo "nfsrdma-n$1"; }

# node_cgroups K: the node's cgroup in every hierarchy this shell is in (under this
# shell's own cgroup there), one "path" per line.
node_cgroups() {
  local c path d
  while IFS=: read -r _ c path; do
    case $c in
      "") d=/sys/fs/cgroup/unified ;;
      name=*) d=/sys/fs/cgroup/${c#name=} ;;
      *) d=/sys/fs/cgroup/$c ;;
    esac
    [ -d "$d" ] && echo "$d${path%/}/nfsrdma-n$1"
  done </proc/self/cgroup
}

# nodes_network: the bridge joining this host and the nodes.
nodes_network() {
  ip link add "$NODES_BRIDGE" type bridge
  ip addr add "$NODES_NET.1/24" dev "$NODES_BRIDGE"
  ip link set "$NODES_BRIDGE" up
  sysctl -qw net.ipv4.ip_forward=1
}

# node_up K: start node K; returns once its init runs (Ready is waited for by up).
node_up() {
  local k=$1 name dir run ns addr cg
  name=$(node_name "$k") dir=$(node_dir "$k") run=$(node_run "$k") ns=$(node_netns "$k")
  addr=$NODES_NET.$k
  mkdir -p "$dir/logs" "$dir/fs" "$run"
  # network: a veth from the bridge into the node's namespace; the node's own pod
  # bridge is made by the CNI plugin.
  ip netns add "$ns"
  ip link add "nfsrdma-v$k" type veth peer name eth0 netns "$ns"
  ip link set "nfsrdma-v$k" master "$NODES_BRIDGE" up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  local r
  for r in "$IP/32" "$SERVICE_CIDR" "$POD_NET.0.0/16"; do ip -n "$ns" route add "$r" via "$NODES_NET.1"; done
  ip route add "$POD_NET.$k.0/24" via "$addr"
  ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
  # configuration
  cp "$CLUSTER_DIR/kubeconfig" "$dir/kubeconfig"
  write_cni "$dir" "nfsrdma0" "$POD_NET.$k.0/24" "$POD_NET.$k.1" "$POD_NET.0.0/16" "$NODES_NET.0/24"
  write_containerd "$dir" "$run"
  write_kubelet "$dir" "$run" "$addr"
  write_kube_proxy "$dir" "$name" "$addr" 10256 10249
  cat >"$dir/node.env" <<EOT
NODE_NAME=$name
NODE_IP=$addr
RUNDIR=$run
BIN=$BIN
KUBELET_DIR=$KUBELET_DIR
EOT
  # cgroups: the init joins the node's cgroup of each hierarchy before it makes its
  # cgroup namespace, so that the node sees that cgroup as its root.
  node_cgroups "$k" >"$dir/cgroups"
  for cg in $(cat "$dir/cgroups"); do
    mkdir -p "$cg"
    # a new cpuset has no CPUs nor memory nodes: its parent's
    case $cg in */cpuset/*) cat "${cg%/*}/cpuset.cpus" >"$cg/cpuset.cpus"; cat "${cg%/*}/cpuset.mems" >"$cg/cpuset.mems" ;; esac
  done
  setsid bash -c 'for cg in $(cat "$1/cgroups"); do echo $$ >"$cg/cgroup.procs"; done
    exec ip netns exec "$2" unshare --pid --fork --kill-child --mount-proc --uts --ipc --cgroup \
      --propagation private "$3/hack/cluster-node" "$1"' \
    _ "$dir" "$ns" "$REPO" >"$dir/logs/init.log" 2>&1 </dev/null &
  echo $! >"$CLUSTER_DIR/pids/node$k"
}

# node_init_pid K: the host's pid of node K's init (PID 1 in the node's namespaces).
node_init_pid() {
  local f=$CLUSTER_DIR/pids/node$1 p
  [ -f "$f" ] || return 1
  p=$(cat "/proc/$(cat "$f")/task/$(cat "$f")/children" 2>/dev/null | awk '{print $1}')
  [ -n "$p" ] && echo "$p"
}

# node_down K: end node K: its init's parent (unshare --kill-child) takes the init and
# with it every process of the node's PID namespace; then its network namespace, route,
# cgroups and state.
node_down() {
  local k=$1 dir cg
  dir=$(node_dir "$k")
  stop "node$k" 10
  ip netns del "$(node_netns "$k")" 2>/dev/null || true
  ip link del "nfsrdma-v$k" 2>/dev/null || true
  ip route del "$POD_NET.$k.0/24" 2>/dev/null || true
  if [ -f "$dir/cgroups" ]; then
    # the node's processes end once the kernel has killed its PID namespace
    local n=20
    while [ $n -gt 0 ] && [ -n "$(find $(cat "$dir/cgroups") -name cgroup.procs -exec cat {} + 2>/dev/null)" ]; do sleep 0.5; n=$((n - 1)); done
    for cg in $(cat "$dir/cgroups"); do
      [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
  fi
  umount_under "$dir"
  umount_under "$(node_run "$k")"
}

# nodes_down: every node 2..N, then the bridge that joined them.
nodes_down() {
  local f k
  for f in "$CLUSTER_DIR"/pids/node[0-9]*; do
    [ -e "$f" ] || continue
    k=${f##*/node}
    node_down "$k"
  done
  # what an interrupted up left without a pid file
  for f in $(ip netns list 2>/dev/null | awk '$1 ~ /^nfsrdma-n[0-9]+$/ {print $1}'); do ip netns del "$f" 2>/dev/null || true; done
  ip link del "$NODES_BRIDGE" 2>/dev/null || true
}

# node_exec NODE CMD...: run CMD in every namespace of NODE (a name, or its number;
# node 1 is this host, where CMD runs as it is).
node_exec() {
  [ $# -ge 2 ] || die "usage: hack/cluster exec NODE CMD..."
  local n=$1 k pid
  shift
  for k in $(seq 1 "$(node_count)"); do
    if [ "$n" = "$k" ] || { [ "$k" = 1 ] && [ "$n" = "$NODE" ]; } || { [ "$k" -gt 1 ] && [ "$n" = "$(node_name "$k")" ]; }; then
      [ "$k" = 1 ] && exec "$@"
      pid=$(node_init_pid "$k") || die "node $n is not running"
      # into the node's cgroups first, so that what runs is the node's
      local cg
      for cg in $(cat "$(node_dir "$k")/cgroups"); do echo $$ >"$cg/cgroup.procs"; done
      exec nsenter --target "$pid" --mount --uts --ipc --net --pid --cgroup -- "$@"
    fi
  done
  die "no node $n"
}
