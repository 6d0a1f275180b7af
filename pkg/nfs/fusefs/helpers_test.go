package fusefs

import (
	"os"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

func attrForTest(size int) nfs3.Fattr {
	return nfs3.Fattr{Type: nfs3.TypeReg, Size: uint64(size), FileID: 7, Mtime: nfs3.Time{Seconds: uint32(size)}}
}

// writeSync writes data to a new or truncated file at path (mode 0644)
// and fsyncs and closes it, returning the first error.
func writeSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
