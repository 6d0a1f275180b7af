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
	inflight   int                     // bytes copied for write-behind, not yet acknowledged
	dirty      int                     // bytes acknowledged UNSTABLE, not known to be committed
	dirtyFiles map[*writeBack]struct{} // the inodes with uncommitted data
	committing bool
}

func newBudget() *budget {
	b := &budget{dirtyFiles: map[*writeBack]struct{}{}}
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

// dirtied records k bytes written UNSTABLE through w and starts a
// background commit of the mount's dirty files when they pass
// MountDirtyBytes.
func (sys *fsys) dirtied(w *writeBack, k int) {
	b := sys.budget
	b.mu.Lock()
	b.dirty += k
	b.dirtyFiles[w] = struct{}{}
	start := b.dirty > MountDirtyBytes && !b.committing
	if start {
		b.committing = true
	}
	b.mu.Unlock()
	if start {
		go sys.commitDirty()
	}
}

// undirty records that k bytes written through w were committed.
func (sys *fsys) undirty(w *writeBack, k int, clean bool) {
	b := sys.budget
	b.mu.Lock()
	b.dirty = max(b.dirty-k, 0)
	if clean {
		delete(b.dirtyFiles, w)
	}
	b.mu.Unlock()
}

// commitDirty COMMITs every dirty file of the mount, one at a time.
func (sys *fsys) commitDirty() {
	b := sys.budget
	b.mu.Lock()
	files := make([]*writeBack, 0, len(b.dirtyFiles))
	for w := range b.dirtyFiles {
		files = append(files, w)
	}
	b.mu.Unlock()
	for _, w := range files {
		w.mu.Lock()
		ctx := client.WithCred(sys.bg, w.cred)
		w.mu.Unlock()
		if err := w.commit(ctx); err != nil {
			klog.V(2).InfoS("fusefs: background COMMIT failed (retried at close)", "fh", w.n.fh.String(), "err", err)
		}
	}
	b.mu.Lock()
	b.committing = false
	b.mu.Unlock()
}
