package fusefs

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
)

// writer is the write-behind state of one inode.
type writer struct {
	f     *client.File
	mu    sync.Mutex
	cond  sync.Cond
	busy  []span       // ranges of the writes in flight
	n     int          // bytes in flight
	err   error        // first error of a background write, reported by flush
	dirty int          // bytes acknowledged since the last COMMIT (an upper bound)
	cred  *client.Cred // the credential of the last write: background COMMITs use it
}

type span struct{ off, end int64 }

func (n *node) writer() *writer {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.w == nil {
		n.w = &writer{f: n.sys.c.OpenFile(n.fh)}
		n.w.cond.L = &n.w.mu
	}
	return n.w
}

// waitWrites waits until every write of n in flight was acknowledged and
// returns the first background write error (kept for flush).
func (n *node) waitWrites() error {
	n.mu.Lock()
	w := n.w
	n.mu.Unlock()
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.busy) > 0 {
		w.cond.Wait()
	}
	return w.err
}

// Write answers WRITE: data is copied and sent as UNSTABLE WRITEs in the
// background (write-behind, at most WriteBehindBytes in flight per inode;
// a write overlapping one in flight waits for it so that the server sees
// them in order). With noac the write is synchronous. An error of a
// background write is returned by the next flush or fsync (close(2) or
// fsync(2)), as Linux NFS does.
func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (_ uint32, errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	n.setFlushed(fh, false)
	if n.sys.o.ReadOnly {
		return 0, syscall.EROFS
	}
	w := n.writer()
	sp := span{off, off + int64(len(data))}
	w.mu.Lock()
	for w.n > 0 && (w.n+len(data) > WriteBehindBytes || w.overlaps(sp)) {
		w.cond.Wait()
	}
	w.busy = append(w.busy, sp)
	w.n += len(data)
	w.mu.Unlock()
	if n.sys.o.NoAC {
		k, err := w.f.WriteAt(ctx, data, off)
		n.done(w, sp, k, nil)
		if err != nil {
			return uint32(k), toErrno(err)
		}
		return uint32(k), 0
	}
	n.sys.budget.acquire(len(data))
	buf := make([]byte, len(data)) // go-fuse reuses data after we return
	copy(buf, data)
	cred := client.CredFrom(ctx) // the writer's, as Linux's write-back uses the opener's
	w.mu.Lock()
	w.cred = cred
	w.mu.Unlock()
	go func() {
		k, err := w.f.WriteAt(client.WithCred(n.sys.bg, cred), buf, off)
		n.sys.budget.release(len(buf))
		if err != nil {
			klog.V(2).InfoS("fusefs: background write failed", "fh", n.fh.String(), "offset", off, "bytes", len(buf), "err", err)
		}
		n.done(w, sp, k, err)
	}()
	return uint32(len(data)), 0
}

func (w *writer) overlaps(sp span) bool {
	for _, b := range w.busy {
		if sp.off < b.end && b.off < sp.end {
			return true
		}
	}
	return false
}

// done ends the write of sp (k bytes of it acknowledged), recording err.
func (n *node) done(w *writer, sp span, k int, err error) {
	w.mu.Lock()
	for i, b := range w.busy {
		if b == sp {
			w.busy = append(w.busy[:i], w.busy[i+1:]...)
			break
		}
	}
	w.n -= int(sp.end - sp.off)
	w.dirty += k
	if err != nil && w.err == nil {
		w.err = err
	}
	w.cond.Broadcast()
	w.mu.Unlock()
	if k > 0 {
		n.sys.dirtied(n, k)
	}
	if err != nil {
		n.dropPages()
	}
}

// dropPages drops the kernel's cached pages (and attributes) of n, after a
// write or COMMIT failed: the kernel's page cache holds the data of a
// write we answered before it reached the server (write-behind), and data
// the server did not store must not be read back through the mount (as
// Linux NFS, whose write error drops the pages: nfs_write_error). From a
// background write, in its own goroutine: the kernel's invalidation waits
// for locked pages, which a write(2) waiting for this inode's write-behind
// room may hold; sync, which reports the error to close(2) and fsync(2),
// drops them again before it returns (dropPagesNow).
func (n *node) dropPages() {
	go n.dropPagesNow()
}

// dropPagesNow is dropPages, waiting for the kernel.
func (n *node) dropPagesNow() {
	if errno := n.NotifyContent(0, 0); errno != 0 && errno != syscall.ENOENT {
		klog.V(2).InfoS("fusefs: dropping pages after a write error", "fh", n.fh.String(), "err", errno)
	}
}

// commit COMMITs what n's writes acknowledged so far (client.File.Commit)
// and updates the mount's dirty accounting.
func (n *node) commit(ctx context.Context) error {
	n.mu.Lock()
	w := n.w
	n.mu.Unlock()
	if w == nil {
		return nil
	}
	w.mu.Lock()
	d := w.dirty
	w.dirty = 0
	w.mu.Unlock()
	if err := w.f.Commit(ctx); err != nil {
		w.mu.Lock()
		w.dirty += d
		w.mu.Unlock()
		return err
	}
	w.mu.Lock()
	clean := w.dirty == 0 && len(w.busy) == 0
	w.mu.Unlock()
	n.sys.undirty(n, d, clean)
	return nil
}

// sync waits for the writes in flight, then COMMITs; it returns (and
// forgets) the first write error, else the COMMIT's, after dropping the
// kernel's pages of n (dropPages).
func (n *node) sync(ctx context.Context) syscall.Errno {
	n.mu.Lock()
	w := n.w
	n.mu.Unlock()
	if w == nil {
		return 0
	}
	w.mu.Lock()
	for len(w.busy) > 0 {
		w.cond.Wait()
	}
	err := w.err
	w.err = nil
	w.mu.Unlock()
	if cerr := n.commit(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		n.dropPagesNow() // before close(2) or fsync(2) reports the error
	}
	return toErrno(err)
}
