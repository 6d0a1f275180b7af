package volumes

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// Status returns what the admin API's status reports: version, root,
// number of volumes, and the root file system's size and the bytes
// available in it (statfs(2)).
func (r *Registry) Status() (admin.Status, error) {
	var sf unix.Statfs_t
	if err := unix.Fstatfs(r.rootFD, &sf); err != nil {
		return admin.Status{}, fmt.Errorf("volumes: statfs of the root: %w", err)
	}
	r.mu.Lock()
	n := len(r.vols)
	r.mu.Unlock()
	return admin.Status{
		Version: r.version, Root: r.root, Volumes: n,
		CapacityBytes: int64(sf.Blocks) * sf.Bsize, FreeBytes: int64(sf.Bavail) * sf.Bsize,
	}, nil
}
