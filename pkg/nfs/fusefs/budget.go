package fusefs

import (
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"sync"

	"k8s.io/klog/v2"
)

// Memory bounds of the write path of one mount (see the package doc).
const (
	// WriteBehindBytes bounds, per inode, the bytes of FUSE writes copied
	// and in flight to the server, not yet acknowledged: 8 MiB, 8 writes of
	// MaxWrite. A write past it waits for earlier ones.
	WriteBehindBytes = 8 << 20
	// MountWriteBehindBytes bounds the same over the whole mount, 32 MiB.
	MountWriteBehindBytes = 32 << 20
	// FileUncommittedBytes is client.Options.MaxUncommitted: the data of
	// UNSTABLE writes one file keeps until COMMIT, 16 MiB (past it the
	// client commits before writing more).
	FileUncommittedBytes = 16 << 20
	// MountDirtyBytes bounds the same over the whole mount, 64 MiB: past
	// it, every file with uncommitted data is committed in the background.
	MountDirtyBytes = 64 << 20
)

// budget accounts the write-path memory of one mount.
type budget struct {
	mu         sync.Mutex
	cond       sync.Cond
	inflight   int // bytes copied for write-behind, not yet acknowledged
	dirty      int // bytes acknowledged UNSTABLE, not known to be committed
	dirtyNodes map[*node]struct{}
	committing bool
}

func newBudget() *budget {
	b := &budget{dirtyNodes: map[*node]struct{}{}}
	b.cond.L = &b.mu
	return b
}

// acquire waits until k more bytes may be in flight in the mount.
func (b *budget) acquire(k int) {
	b.mu.Lock()
	for b.inflight > 0 && b.inflight+k > MountWriteBehindBytes {
		b.cond.Wait()
	}
	b.inflight += k
	b.mu.Unlock()
}

// release returns k bytes acquired.
func (b *budget) release(k int) {
	b.mu.Lock()
	b.inflight -= k
	b.cond.Broadcast()
	b.mu.Unlock()
}

// dirtied records k bytes written UNSTABLE to n and starts a background
// commit of the mount's dirty files when they pass MountDirtyBytes.
func (sys *fsys) dirtied(n *node, k int) {
	b := sys.budget
	b.mu.Lock()
	b.dirty += k
	b.dirtyNodes[n] = struct{}{}
	start := b.dirty > MountDirtyBytes && !b.committing
	if start {
		b.committing = true
	}
	b.mu.Unlock()
	if start {
		go sys.commitDirty()
	}
}

// undirty records that k bytes of n were committed.
func (sys *fsys) undirty(n *node, k int, clean bool) {
	b := sys.budget
	b.mu.Lock()
	b.dirty = max(b.dirty-k, 0)
	if clean {
		delete(b.dirtyNodes, n)
	}
	b.mu.Unlock()
}

// commitDirty COMMITs every dirty file of the mount, one at a time.
func (sys *fsys) commitDirty() {
	b := sys.budget
	b.mu.Lock()
	nodes := make([]*node, 0, len(b.dirtyNodes))
	for n := range b.dirtyNodes {
		nodes = append(nodes, n)
	}
	b.mu.Unlock()
	for _, n := range nodes {
		ctx := sys.bg
		n.mu.Lock()
		if n.w != nil {
			n.w.mu.Lock()
			ctx = client.WithCred(ctx, n.w.cred)
			n.w.mu.Unlock()
		}
		n.mu.Unlock()
		if err := n.commit(ctx); err != nil {
			klog.V(2).InfoS("fusefs: background COMMIT failed (retried at close)", "fh", n.fh.String(), "err", err)
		}
	}
	b.mu.Lock()
	b.committing = false
	b.mu.Unlock()
}
