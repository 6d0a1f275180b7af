module github.com/nfsrdma/nfsrdma-csi

go 1.26
