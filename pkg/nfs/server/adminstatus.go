package server

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// Status returns what the admin API's status reports: version, root,
// number of volumes, and the root file system's size and the bytes
// available in it (statfs(2)).
func (s *Server) Status() (admin.Status, error) {
	var sf unix.Statfs_t
	if err := unix.Fstatfs(s.rootFD, &sf); err != nil {
		return admin.Status{}, fmt.Errorf("nfs server: statfs of the root: %w", err)
	}
	s.tmu.Lock()
	n := len(s.reg.vols)
	s.tmu.Unlock()
	return admin.Status{
		Version: s.version, Root: s.root, Volumes: n,
		CapacityBytes: int64(sf.Blocks) * sf.Bsize, FreeBytes: int64(sf.Bavail) * sf.Bsize,
	}, nil
}
