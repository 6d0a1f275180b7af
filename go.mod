module github.com/nfsrdma/nfsrdma-csi

go 1.26

require golang.org/x/sys v0.38.0 // indirect
