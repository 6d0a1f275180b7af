package fusefs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"k8s.io/klog/v2"
)

// openFile is one open of a regular file, the FUSE file handle of an
// OPEN or CREATE: what an open does. It answers the requests the kernel
// sends on an open file (READ, WRITE, FLUSH at each close(2) of one of
// its descriptors, FSYNC, RELEASE after the last, and the lock requests),
// as go-fuse's loopback file does; the node answers those on the inode.
// What the opens of one inode share is in its sharedFile.
type openFile struct {
	n  *node
	sh *sharedFile // n's
	// readOnly: opened O_RDONLY. Closing such a descriptor writes nothing
	// back (as Linux's nfs_file_flush), so that it does not wait for the
	// server, e.g. at the close-on-exec of every fork+exec.
	readOnly bool
	// flushed: a FLUSH came (the close(2) of a descriptor of this open
	// file) and no WRITE or FSYNC through it since, so its RELEASE is
	// likely on its way (setFlushed, sharedFile.awaitRelease). A READ
	// says nothing: the kernel's read-ahead sends them after the close
	// too. Guarded by sh.mu.
	flushed bool
	// lockOwners are the owners that locked through this open file
	// (lock.go): POSIX ones drop their locks at FLUSH, but open file
	// description locks (F_OFD_SETLK, owned by the open file) are only
	// dropped at its RELEASE. Guarded by sh.mu.
	lockOwners map[uint64]bool
	// lost: the mount process that served this open file died (Recover)
	// and writes it acknowledged through any open file of the inode may
	// not have reached the server. The next FSYNC through it reports EIO
	// (errLostWrites) and clears lost; each FLUSH until then reports it
	// too without clearing, so that the close-on-exec of a fork does not
	// take the error from the writer's fsync(2). Guarded by sh.mu.
	lost bool
}

var (
	_ fs.FileReader   = (*openFile)(nil)
	_ fs.FileWriter   = (*openFile)(nil)
	_ fs.FileFlusher  = (*openFile)(nil)
	_ fs.FileFsyncer  = (*openFile)(nil)
	_ fs.FileReleaser = (*openFile)(nil)
	_ fs.FileGetlker  = (*openFile)(nil)
	_ fs.FileSetlker  = (*openFile)(nil)
	_ fs.FileSetlkwer = (*openFile)(nil)
)

// sharedFile is what the open files of one inode share, one per inode
// (the node's, from its first open on): what the kernel's page cache and
// the server's file are shared by, whichever open file a request comes
// through.
//   - The write-back of its data (writeback.go): every open writes
//     through it, and a READ, GETATTR, SETATTR, OPEN or lock of the inode
//     waits for its writes in flight, whichever open made them.
//   - The count of its opens, of them those closing, and its READs in
//     progress, which an unlink of the file waits on (awaitRelease); and
//     where a silly rename put the file, removed at the last RELEASE
//     (sillyrename.go).
type sharedFile struct {
	wb writeBack

	mu      sync.Mutex
	opens   int           // open files (OPEN, CREATE not yet RELEASEd)
	closed  int           // of them, those flushed since their last use (openFile.flushed)
	reads   int           // READs in progress
	readEnd time.Time     // when the last READ ended
	rel     chan struct{} // closed at the next RELEASE or end of a READ, for awaitRelease
	silly   *silly        // where this open file was renamed to at unlink
}

// sharedFile returns n's sharedFile, made at the first call.
func (n *node) sharedFile() *sharedFile {
	if sh := n.shared.Load(); sh != nil {
		return sh
	}
	sh := &sharedFile{}
	sh.wb.n = n
	sh.wb.cond.L = &sh.wb.mu
	if n.shared.CompareAndSwap(nil, sh) {
		return sh
	}
	return n.shared.Load()
}

// open counts a new open of n (OPEN, CREATE) and returns it.
func (n *node) open(readOnly bool) *openFile {
	sh := n.sharedFile()
	sh.mu.Lock()
	sh.opens++
	n.sys.opens.Add(1)
	sh.mu.Unlock()
	return &openFile{n: n, sh: sh, readOnly: readOnly}
}

// Open answers OPEN: a GETATTR for close-to-open consistency, then the
// caller's permission for the open's access mode (permit: read for
// O_RDONLY and O_RDWR, write for O_WRONLY and O_RDWR, only execute for an
// exec; EACCES), as Linux's may_open and nfs_open_permission_mask; O_TRUNC
// is checked at the SETATTR that follows (Setattr). When the file changed
// since we last saw it, the kernel's cached attributes and data of the
// inode are dropped; otherwise its page cache is kept (FOPEN_KEEP_CACHE).
// The open file is an openFile.
func (n *node) Open(ctx context.Context, flags uint32) (_ fs.FileHandle, _ uint32, errno syscall.Errno) {
	if h := n.sys.adopt.opened(); h != nil {
		return h, 0, 0 // a handover's restore (handover.go)
	}
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
	return n.open(flags&syscall.O_ACCMODE == syscall.O_RDONLY), fl, 0
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

// setFlushed marks f as closing (flushed true: a FLUSH came, sent at
// every close(2) of one of its descriptors) or as in use (false: a WRITE
// or FSYNC through it, so another descriptor of it is still open). FUSE
// sends the RELEASE of an open file after the close(2) of its last
// descriptor has already returned, and asynchronously, so an unlink
// right after a close(2) can reach us before that RELEASE does
// (sharedFile.awaitRelease).
func (f *openFile) setFlushed(flushed bool) {
	f.sh.mu.Lock()
	f.setFlushedLocked(flushed)
	f.sh.mu.Unlock()
}

// setFlushedLocked is setFlushed with f.sh.mu held.
func (f *openFile) setFlushedLocked(flushed bool) {
	if f.flushed == flushed {
		return
	}
	f.flushed = flushed
	if flushed {
		f.sh.closed++
	} else {
		f.sh.closed--
	}
}

// Flush answers FLUSH (each close of a descriptor): write back and COMMIT
// the inode's writes, the "close" half of close-to-open; nothing for a
// descriptor opened read-only. The open file is marked closing
// (setFlushed). The POSIX locks of the closing owner end (lock.go).
func (f *openFile) Flush(ctx context.Context) (errno syscall.Errno) {
	n := f.n
	f.setFlushed(true)
	ro, hasOwner := n.sys.owners.ownerOf(ctx) // before ctx is replaced
	ctx, op := n.call(ctx, &errno)            // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	if !f.readOnly {
		errno = f.sh.wb.sync(ctx)
		if errno == 0 && f.lostWrites(false) {
			errno = syscall.EIO
		}
	}
	if hasOwner && !ro.flock {
		// POSIX locks end at any close by their owner, after the
		// writes they covered reached the server (lock.go); a FLUSH
		// given up at a handover in the grace period is sent again
		n.dropLocks(n.sys.graceWait(ctx), ro.owner, false)
	}
	return errno
}

// Fsync answers FSYNC: write back and COMMIT the inode's writes.
func (f *openFile) Fsync(ctx context.Context, _ uint32) (errno syscall.Errno) {
	ctx, op := f.n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	f.setFlushed(false)
	errno = f.sh.wb.sync(ctx)
	if f.lostWrites(true) && errno == 0 {
		errno = syscall.EIO
	}
	return errno
}

// lostWrites reports whether f is lost (its mount process died with
// writes acknowledged, errLostWrites), clearing it when clear; a lost
// f has the kernel's pages of the inode dropped first (dropPagesNow):
// they hold what the server may not have.
func (f *openFile) lostWrites(clear bool) bool {
	f.sh.mu.Lock()
	lost := f.lost
	if clear {
		f.lost = false
	}
	f.sh.mu.Unlock()
	if lost {
		klog.InfoS("fusefs: reporting writes lost with the dead mount process", "fh", f.n.fh.String(), "err", errLostWrites)
		f.sh.wb.dropPagesNow()
	}
	return lost
}

// Release answers RELEASE, after the last close of the open file: its
// flock lock and open file description locks end (lock.go); FLUSH already
// wrote everything back, and a write that failed after the last flush is
// only logged. The last RELEASE of a silly-renamed file removes it
// (released).
func (f *openFile) Release(ctx context.Context) syscall.Errno {
	n := f.n
	ro, flock := n.sys.owners.ownerOf(ctx)
	if owners := f.lockOwnerList(); len(owners) > 0 || flock && ro.flock {
		lctx, op := n.sys.call(ctx)
		// an unlock waiting out the server's grace period is carried
		// by a handover (releaseGraceWait)
		if flock && ro.flock {
			n.dropLocks(n.sys.releaseGraceWait(lctx, n.fh, ro.owner, ro), ro.owner, true) // flock locks end at the last close of their open file
		}
		for _, o := range owners {
			n.dropLocks(n.sys.releaseGraceWait(lctx, n.fh, o, ro), o, false) // and so do its open file description locks
		}
		op.done()
	}
	if !f.readOnly {
		if errno := f.sh.wb.sync(ctx); errno != 0 {
			klog.InfoS("fusefs: write back at release failed", "fh", n.fh.String(), "err", errno)
		}
	}
	f.released(n.sys.bg)
	return 0
}
