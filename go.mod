module github.com/nfsrdma/nfsrdma-csi

go 1.26.0

require (
	github.com/go-logr/logr v1.4.4
	github.com/hanwen/go-fuse/v2 v2.8.0
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.9
	golang.org/x/sys v0.48.0
	k8s.io/klog/v2 v2.140.0
)

require (
	github.com/Mellanox/rdmamap v1.1.0 // indirect
	github.com/container-storage-interface/spec v1.13.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/kubernetes-csi/csi-test/v5 v5.6.0 // indirect
	github.com/moby/sys/mountinfo v0.7.2 // indirect
	github.com/prometheus/client_golang v1.24.1 // indirect
	github.com/vishvananda/netlink v1.1.0 // indirect
	github.com/vishvananda/netns v0.0.0-20191106174202-0a2b9b5464df // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	k8s.io/api v0.36.6 // indirect
	k8s.io/apimachinery v0.36.6 // indirect
	k8s.io/client-go v0.36.6 // indirect
	k8s.io/kubelet v0.36.6 // indirect
	k8s.io/mount-utils v0.36.6 // indirect
	k8s.io/utils v0.0.0-20260210185600-b8788abfbbc2 // indirect
)
