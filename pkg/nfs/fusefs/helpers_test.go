package fusefs

import "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"

func attrForTest(size int) nfs3.Fattr {
	return nfs3.Fattr{Type: nfs3.TypeReg, Size: uint64(size), FileID: 7, Mtime: nfs3.Time{Seconds: uint32(size)}}
}
