package fusefs

import (
	"context"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

// fsys is what every node of one mount shares.
type fsys struct {
	c       *client.Client
	o       mountopts.Options
	blksize uint32
	// nameMax is the longest name in bytes the server takes (PATHCONF
	// name_max at mount, at most nfs3.MaxNameLen).
	nameMax int
	// bg bounds the background (write-behind) WRITEs; cancelled at unmount.
	bg      context.Context
	cancel  context.CancelFunc // ends bg
	budget  *budget
	callers *callers           // the credential of each FUSE caller (cred.go)
	intr    *interrupts        // FUSE requests in flight (interrupt.go)
	local   localLocks         // locks local_lock keeps here (lock.go)
	owners  *lockOwners        // lock owners of FLUSH and RELEASE (lock.go)
	unlocks pendingUnlocks     // unlocks at a RELEASE waiting out a grace period (lock.go)
	raw     fuse.RawFileSystem // go-fuse's bridge (fs.NewNodeFS)
	gate    *gate              // what the FUSE server calls: stops requests for a handover (gate.go)
	adopt   adoptSlot          // what a handover registers next (handover.go)
	root    *node
	// sillyCount numbers the hidden names of silly renames.
	sillyCount atomic.Uint64
	// opens counts the open files of the mount not yet released (each
	// OPEN and CREATE until its RELEASE): while none is, no unlink or
	// rename waits for a RELEASE (answersAlone).
	opens atomic.Int64
	// dirEntries counts the READDIRPLUS entries kept in nodes' plus maps
	// (MemoryStats.DirEntries).
	dirEntries atomic.Int64
	// accessEntries counts the ACCESS answers kept in nodes' access
	// caches (MemoryStats.AccessEntries).
	accessEntries atomic.Int64
}
