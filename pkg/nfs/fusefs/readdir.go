package fusefs

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// dirStream lists a directory one READDIRPLUS reply at a time: its memory
// is one reply (at most the server's dtpref, 1 MiB). Each entry's handle
// and attributes are left in the node's plus map for the LOOKUP the kernel
// (or go-fuse's READDIRPLUS) sends for it next, so that listing N entries
// costs N/entries-per-reply calls, not N LOOKUPs. The offset of an entry
// is its NFS cookie, so seekdir/telldir work.
type dirStream struct {
	n      *node
	cookie uint64
	verf   nfs3.CookieVerf
	ents   []nfs3.EntryPlus
	eof    bool
}

var (
	_ fs.FileReaddirenter = (*dirStream)(nil)
	_ fs.FileSeekdirer    = (*dirStream)(nil)
	_ fs.FileReleasedirer = (*dirStream)(nil)
)

// OpendirHandle answers OPENDIR: the caller needs read permission on the
// directory (permit; EACCES), as Linux's may_open asks of NFS.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (_ fs.FileHandle, _ uint32, errno syscall.Errno) {
	if h := n.sys.adopt.opened(); h != nil {
		return h, 0, 0 // a handover's restore (handover.go)
	}
	cctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	if errno := n.permit(cctx, mayRead); errno != 0 {
		return nil, 0, errno
	}
	return &dirStream{n: n}, 0, 0
}

// Readdirent returns the next entry, nil at the end.
//
// Its READDIRPLUS is not given up when the kernel interrupts the FUSE
// request (see fsys.call): go-fuse (v2.8 to v2.12) keeps an error returned in the
// middle of a FUSE READDIRPLUS (fileEntry.overflowErrno) and returns it in
// place of every later entry that does not fit a reply, dropping that
// entry; with EINTR, which callers retry, entries vanished without an
// error (TestSignalledCallers). For the same reason a READDIRPLUS given
// up past the grace (a hard mount whose server does not answer) ends the
// listing with EIO, not EINTR (TestInterruptGrace).
func (d *dirStream) Readdirent(ctx context.Context) (_ *fuse.DirEntry, errno syscall.Errno) {
	for len(d.ents) == 0 {
		if d.eof {
			return nil, 0
		}
		ctx, op := d.n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
		errno = d.fill(ctx)
		op.done()
		if errno == syscall.EINTR {
			errno = syscall.EIO
		}
		if errno != 0 {
			return nil, errno
		}
	}
	e := d.ents[0]
	d.ents = d.ents[1:]
	d.cookie = e.Cookie
	de := &fuse.DirEntry{Name: e.Name, Ino: e.FileID, Off: e.Cookie}
	if e.Attr.Set {
		de.Mode = typeBits(e.Attr.Attr.Type)
	}
	return de, 0
}

// fill reads the next READDIRPLUS reply after d.cookie (RFC 1813 section
// 3.3.17). Errors: EINVAL when the server refuses the cookie
// (NFS3ERR_BAD_COOKIE) even with a zero verifier, the errno of the NFS
// status, EIO for a transport error or a reply with neither entries nor
// EOF.
func (d *dirStream) fill(ctx context.Context) syscall.Errno {
	c := d.n.sys.c
	max := uint32(c.FsinfoAtMount().DTPref)
	if max < 4096 {
		max = 32 << 10
	}
	max = min(max, 1<<20)
	res, err := c.ReaddirplusOnce(ctx, d.n.fh, d.cookie, d.verf, max/8, max)
	if errors.Is(err, nfs3.ErrBadCookie) && d.cookie != 0 && d.verf != (nfs3.CookieVerf{}) {
		// The directory changed since the listing began (servers that
		// check verifiers often derive them from its mtime): go on
		// from the same cookie with a zero verifier, which RFC 1813
		// section 3.3.16 lets a server accept (ours does; knfsd ignores
		// verifiers). Entries created or removed meanwhile may or may
		// not be listed, as POSIX allows; the others are listed once.
		res, err = c.ReaddirplusOnce(ctx, d.n.fh, d.cookie, nfs3.CookieVerf{}, max/8, max)
	}
	if err != nil {
		if errors.Is(err, nfs3.ErrBadCookie) {
			return syscall.EINVAL
		}
		return toErrno(err)
	}
	if res.DirAttr.Set {
		d.n.refresh(&res.DirAttr.Attr)
	}
	d.verf, d.eof, d.ents = res.Verf, res.EOF, res.Entries
	if !res.EOF && len(res.Entries) == 0 {
		return syscall.EIO
	}
	plus := make(map[string]nfs3.EntryPlus, len(res.Entries))
	for _, e := range res.Entries {
		if e.Name != "." && e.Name != ".." && e.Handle.Set && e.Attr.Set {
			plus[e.Name] = e
		}
	}
	d.n.mu.Lock()
	d.n.setPlusLocked(plus)
	d.n.plusAt = time.Now()
	d.n.mu.Unlock()
	return 0
}

// Seekdir restarts the listing after the entry whose cookie is off (0:
// from the beginning).
func (d *dirStream) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.cookie, d.ents, d.eof = off, nil, false
	if off == 0 {
		d.verf = nfs3.CookieVerf{}
	}
	return 0
}

// Releasedir drops the entries not looked up.
func (d *dirStream) Releasedir(ctx context.Context, flags uint32) {
	d.n.mu.Lock()
	d.n.setPlusLocked(nil)
	d.n.mu.Unlock()
}
