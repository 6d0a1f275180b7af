// Package node is the end-to-end test of the driver on a real one-node
// Kubernetes cluster (hack/cluster: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet, kube-proxy, containerd,
// runc, CNI bridge, CoreDNS), driven as a user drives it: helm installs the
// chart deploy/helm/nfsrdma-csi with the locally built images, and every
// step runs kubectl (each command and its output are printed, so the log
// reads like a walk-through). It is behind the build tag node; hack/test-node
// brings the cluster up and down around it:
//
//	eval "$(hack/cluster env)"; go test -tags node -count=1 -v ./test/node/
//
// It needs root (it checks the host's mounts and processes) and the
// environment hack/cluster env prints (skips without it, fails under
// CI=true).
package node
