# Sourced by hack/cluster: the configuration files of one node (CNI, containerd,
# kubelet, kube-proxy), written alike for node 1 (this host) and for nodes 2..N
# (hack/cluster-node). Each writer takes the node's directory first.

# write_cni DIR BRIDGE CIDR GW [ROUTE...]: the bridge network of the node's pods;
# routes only to the Service range, this host and the given ranges (no default
# route: nothing leaves the machine).
write_cni() {
  local dir=$1 bridge=$2 cidr=$3 gw=$4 r routes
  shift 4
  routes="{\"dst\": \"$SERVICE_CIDR\"}, {\"dst\": \"$IP/32\"}"
  for r; do routes="$routes, {\"dst\": \"$r\"}"; done
  mkdir -p "$dir/cni/net.d" "$dir/cni/ipam"
  cat >"$dir/cni/net.d/10-nfsrdma.conflist" <<EOT
{
  "cniVersion": "1.0.0",
  "name": "nfsrdma-cluster",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/ipam",
        "ranges": [[{"subnet": "$cidr", "gateway": "$gw"}]],
        "routes": [$routes]
      }
    }
  ]
}
EOT
}

# write_containerd DIR RUNDIR: containerd's root under DIR, its state and sockets
# under RUNDIR.
write_containerd() {
  local dir=$1 run=$2
  cat >"$dir/containerd.toml" <<EOT
version = 3
root = "$dir/containerd"
state = "$run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "$run/containerd.sock"

[ttrpc]
  address = "$run/containerd.sock.ttrpc"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMAGE"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$dir/cni/net.d"
EOT
}

# write_kubelet DIR RUNDIR ADDRESS: kubelet's configuration (cgroup v1 allowed,
# cgroupfs driver, anonymous read-only access for the test cluster's apiserver).
write_kubelet() {
  local dir=$1 run=$2 addr=$3
  cat >"$dir/kubelet.yaml" <<EOT
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$run/containerd.sock
failSwapOn: false
readOnlyPort: 0
address: $addr
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
clusterDNS: [$POD_GW]
resolvConf: ""
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOT
}

# write_kube_proxy DIR NODE ADDRESS HEALTHPORT METRICSPORT: kube-proxy in iptables
# mode on the node's address.
write_kube_proxy() {
  local dir=$1 node=$2 addr=$3 health=$4 metrics=$5
  cat >"$dir/kube-proxy.yaml" <<EOT
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $dir/kubeconfig
hostnameOverride: $node
mode: iptables
bindAddress: $addr
healthzBindAddress: 127.0.0.1:$health
metricsBindAddress: 127.0.0.1:$metrics
nodePortAddresses: ["$addr/32"]
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOT
}
