module github.com/nfsrdma/nfsrdma-csi

go 1.26

require (
	github.com/hanwen/go-fuse/v2 v2.8.0
	github.com/spf13/cobra v1.10.1
	github.com/spf13/pflag v1.0.9
	golang.org/x/sys v0.38.0
	k8s.io/klog/v2 v2.130.1
)

require (
	github.com/go-logr/logr v1.4.1 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
)
