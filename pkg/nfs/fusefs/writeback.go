package fusefs

import (
	"context"
	"sync"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
)

// writeBack is the write-behind of one inode (its sharedFile's): the
// writes of every open file of it, as the page cache they come from is
// the inode's. Guarded by mu.
type writeBack struct {
	n     *node
	mu    sync.Mutex
	cond  sync.Cond    // on mu: a write ended
	f     *client.File // the NFS file written to, from the first write on
	busy  []span       // ranges of the writes in flight
	bytes int          // bytes in flight
	err   error        // first error of a background write, reported by flush
	dirty int          // bytes acknowledged since the last COMMIT (an upper bound)
	cred  *client.Cred // the credential of the last write: background COMMITs use it
}

type span struct{ off, end int64 }

// waitWrites waits until every write of n in flight (through any of its
// open files) was acknowledged and returns the first background write
// error (kept for flush).
func (n *node) waitWrites() error {
	sh := n.shared.Load()
	if sh == nil {
		return nil // never opened: nothing written
	}
	return sh.wb.wait()
}

// wait is waitWrites.
func (w *writeBack) wait() error {
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
// fsync(2)) of any open file of the inode, as Linux NFS does.
func (f *openFile) Write(ctx context.Context, data []byte, off int64) (_ uint32, errno syscall.Errno) {
	ctx, op := f.n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	f.setFlushed(false)
	if f.n.sys.o.ReadOnly {
		return 0, syscall.EROFS
	}
	return f.sh.wb.write(ctx, data, off)
}

// write is Write, the caller's context ctx holding its credential.
func (w *writeBack) write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n := w.n
	sp := span{off, off + int64(len(data))}
	w.mu.Lock()
	if w.f == nil {
		w.f = n.sys.c.OpenFile(n.fh)
	}
	for w.bytes > 0 && (w.bytes+len(data) > WriteBehindBytes || w.overlaps(sp)) {
		w.cond.Wait()
	}
	w.busy = append(w.busy, sp)
	w.bytes += len(data)
	nf := w.f
	w.mu.Unlock()
	if n.sys.o.NoAC {
		k, err := nf.WriteAt(ctx, data, off)
		w.done(sp, k, nil)
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
		k, err := nf.WriteAt(client.WithCred(n.sys.bg, cred), buf, off)
		n.sys.budget.release(len(buf))
		if err != nil {
			klog.V(2).InfoS("fusefs: background write failed", "fh", n.fh.String(), "offset", off, "bytes", len(buf), "err", err)
		}
		w.done(sp, k, err)
	}()
	return uint32(len(data)), 0
}

func (w *writeBack) overlaps(sp span) bool {
	for _, b := range w.busy {
		if sp.off < b.end && b.off < sp.end {
			return true
		}
	}
	return false
}

// done ends the write of sp (k bytes of it acknowledged), recording err.
func (w *writeBack) done(sp span, k int, err error) {
	w.mu.Lock()
	for i, b := range w.busy {
		if b == sp {
			w.busy = append(w.busy[:i], w.busy[i+1:]...)
			break
		}
	}
	w.bytes -= int(sp.end - sp.off)
	w.dirty += k
	if err != nil && w.err == nil {
		w.err = err
	}
	w.cond.Broadcast()
	w.mu.Unlock()
	if k > 0 {
		w.n.sys.dirtied(w, k)
	}
	if err != nil {
		w.dropPages()
	}
}

// dropPages drops the kernel's cached pages (and attributes) of the
// inode, after a write or COMMIT failed: the kernel's page cache holds
// the data of a write we answered before it reached the server
// (write-behind), and data the server did not store must not be read
// back through the mount (as Linux NFS, whose write error drops the
// pages: nfs_write_error). From a background write, in its own goroutine:
// the kernel's invalidation waits for locked pages, which a write(2)
// waiting for this inode's write-behind room may hold; sync, which
// reports the error to close(2) and fsync(2), drops them again before it
// returns (dropPagesNow).
func (w *writeBack) dropPages() {
	go w.dropPagesNow()
}

// dropPagesNow is dropPages, waiting for the kernel.
func (w *writeBack) dropPagesNow() {
	if errno := w.n.NotifyContent(0, 0); errno != 0 && errno != syscall.ENOENT {
		klog.V(2).InfoS("fusefs: dropping pages after a write error", "fh", w.n.fh.String(), "err", errno)
	}
}

// commit COMMITs what the writes acknowledged so far (client.File.Commit)
// and updates the mount's dirty accounting.
func (w *writeBack) commit(ctx context.Context) error {
	w.mu.Lock()
	f := w.f
	if f == nil {
		w.mu.Unlock()
		return nil // nothing written
	}
	d := w.dirty
	w.dirty = 0
	w.mu.Unlock()
	if err := f.Commit(ctx); err != nil {
		w.mu.Lock()
		w.dirty += d
		w.mu.Unlock()
		return err
	}
	w.mu.Lock()
	clean := w.dirty == 0 && len(w.busy) == 0
	w.mu.Unlock()
	w.n.sys.undirty(w, d, clean)
	return nil
}

// sync waits for the writes in flight, then COMMITs; it returns (and
// forgets) the first write error, else the COMMIT's, after dropping the
// kernel's pages of the inode (dropPages).
func (w *writeBack) sync(ctx context.Context) syscall.Errno {
	w.mu.Lock()
	if w.f == nil {
		w.mu.Unlock()
		return 0 // nothing written
	}
	for len(w.busy) > 0 {
		w.cond.Wait()
	}
	err := w.err
	w.err = nil
	w.mu.Unlock()
	if cerr := w.commit(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		w.dropPagesNow() // before close(2) or fsync(2) reports the error
	}
	return toErrno(err)
}
