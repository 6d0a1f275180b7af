package fusefs

import (
	"context"
	"errors"
	"io"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
)

// handle is the FUSE file handle of an open regular file. All write
// state is in the node (shared by the handles of the inode, as the page
// cache is).
type handle struct {
	// readOnly: opened O_RDONLY. Closing such a descriptor writes nothing
	// back (as Linux's nfs_file_flush), so that it does not wait for the
	// server, e.g. at the close-on-exec of every fork+exec.
	readOnly bool
	// flushed: a FLUSH came (the close(2) of a descriptor of this open
	// file) and no WRITE or FSYNC through it since, so its RELEASE is
	// likely on its way (node.setFlushed, node.awaitRelease). A READ says
	// nothing: the kernel's read-ahead sends them after the close too.
	// Guarded by the node's mu.
	flushed bool
	// lockOwners are the owners that locked through this open file
	// (lock.go): POSIX ones drop their locks at FLUSH, but open file
	// description locks (F_OFD_SETLK, owned by the open file) are only
	// dropped at its RELEASE. Guarded by the node's mu.
	lockOwners map[uint64]bool
}

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

// Open answers OPEN: a GETATTR for close-to-open consistency, then the
// caller's permission for the open's access mode (permit: read for
// O_RDONLY and O_RDWR, write for O_WRONLY and O_RDWR, only execute for an
// exec; EACCES), as Linux's may_open and nfs_open_permission_mask; O_TRUNC
// is checked at the SETATTR that follows (Setattr). When the file changed
// since we last saw it, the kernel's cached attributes and data of the
// inode are dropped; otherwise its page cache is kept (FOPEN_KEEP_CACHE).
func (n *node) Open(ctx context.Context, flags uint32) (_ fs.FileHandle, _ uint32, errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	if n.sys.o.ReadOnly && flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC) != 0 {
		return nil, 0, syscall.EROFS
	}
	if err := n.waitWrites(); err != nil {
		klog.V(2).InfoS("fusefs: earlier write error pending at open", "fh", n.fh.String(), "err", err)
	}
	n.mu.Lock()
	known := n.ac.valid
	n.mu.Unlock()
	a, err := n.sys.c.Getattr(ctx, n.fh)
	if err != nil {
		return nil, 0, toErrno(err)
	}
	_, changed := n.refresh(&a)
	if changed && flags&syscall.O_TRUNC == 0 {
		// Drop the kernel's attributes (size!) and pages of the inode.
		n.NotifyContent(0, 0)
	}
	if errno := n.permit(ctx, openMay(flags)); errno != 0 {
		return nil, 0, errno
	}
	n.mu.Lock()
	known = known && n.ac.valid // permit's ACCESS may have found a change
	n.mu.Unlock()
	var fl uint32
	if known && !changed {
		fl |= fuse.FOPEN_KEEP_CACHE
	}
	n.opened()
	return &handle{readOnly: flags&syscall.O_ACCMODE == syscall.O_RDONLY}, fl, 0
}

// openMay returns the permissions an open with flags needs, as Linux's
// nfs_open_permission_mask: only execute for an exec, else read unless
// O_WRONLY and write unless O_RDONLY.
func openMay(flags uint32) uint32 {
	if flags&fmodeExec != 0 {
		return mayExec
	}
	var may uint32
	if flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		may |= mayRead
	}
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		may |= mayWrite
	}
	return may
}

// writable reports whether closing fh must write back (see handle).
func writable(fh fs.FileHandle) bool {
	h, ok := fh.(*handle)
	return !ok || !h.readOnly
}

// Read answers READ with client.ReadPlaced (rsize READs, pipelined), after
// the inode's writes in flight have reached the server. Data the
// transport received into its own buffers (RPC-over-RDMA send-based DDP)
// goes to the kernel from there (placedRead): they are given back once
// the reply is written to /dev/fuse.
func (n *node) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (_ fuse.ReadResult, errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	n.readStart()
	defer n.readDone()
	_ = n.waitWrites() // a write error is for flush and fsync to report
	vec, k, release, err := n.sys.c.ReadPlaced(ctx, n.fh, dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, toErrno(err)
	}
	if vec != nil {
		return &placedRead{vec: vec, size: k, release: release}, 0
	}
	return fuse.ReadResultData(dest[:k]), 0
}

// placedRead is a fuse.ReadResult whose data is in the RPC transport's
// receive buffers (client.ReadPlaced): go-fuse writes the pieces with
// writev(2) (Slices) and then calls Done, which gives the buffers back.
type placedRead struct {
	vec     [][]byte
	size    int
	release func()
}

func (r *placedRead) Size() int { return r.size }

// Slices makes go-fuse write the pieces as they are (its vectored
// write), without joining them.
func (r *placedRead) Slices() ([][]byte, fuse.Status) { return r.vec, fuse.OK }

// Bytes joins the pieces into buf, for a write that is not vectored.
func (r *placedRead) Bytes(buf []byte) ([]byte, fuse.Status) {
	buf = buf[:0]
	for _, v := range r.vec {
		buf = append(buf, v...)
	}
	return buf, fuse.OK
}

func (r *placedRead) Done() {
	if r.release != nil {
		r.release()
		r.release, r.vec = nil, nil
	}
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

// Flush answers FLUSH (each close of a descriptor): write back and COMMIT,
// the "close" half of close-to-open; nothing for a descriptor opened
// read-only. The open file is marked closing (node.setFlushed).
func (n *node) Flush(ctx context.Context, fh fs.FileHandle) (errno syscall.Errno) {
	n.setFlushed(fh, true)
	ro, hasOwner := n.sys.owners.ownerOf(ctx) // before ctx is replaced
	ctx, op := n.call(ctx, &errno)            // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	if writable(fh) {
		errno = n.sync(ctx)
	}
	if hasOwner && !ro.flock {
		// POSIX locks end at any close by their owner, after the
		// writes they covered reached the server (lock.go)
		n.dropLocks(ctx, ro.owner, false)
	}
	return errno
}

// Fsync answers FSYNC: write back and COMMIT.
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, _ uint32) (errno syscall.Errno) {
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	n.setFlushed(fh, false)
	return n.sync(ctx)
}

// Release answers RELEASE: FLUSH already wrote everything back; a write
// that failed after the last flush is only logged. The last RELEASE of a
// silly-renamed file removes it (sillyrename.go).
func (n *node) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	ro, flock := n.sys.owners.ownerOf(ctx)
	if owners := n.lockOwnersOf(fh); len(owners) > 0 || flock && ro.flock {
		lctx, op := n.sys.call(ctx)
		if flock && ro.flock {
			n.dropLocks(lctx, ro.owner, true) // flock locks end at the last close of their open file
		}
		for _, o := range owners {
			n.dropLocks(lctx, o, false) // and so do its open file description locks
		}
		op.done()
	}
	if writable(fh) {
		if errno := n.sync(ctx); errno != 0 {
			klog.InfoS("fusefs: write back at release failed", "fh", n.fh.String(), "err", errno)
		}
	}
	n.released(n.sys.bg, fh)
	return 0
}
