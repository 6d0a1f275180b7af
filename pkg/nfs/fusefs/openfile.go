package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"k8s.io/klog/v2"
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
