package server

import (
	"bytes"
	"encoding/binary"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// openDir opens fh as a directory the caller may change: NFS3ERR_NOTDIR,
// NFS3ERR_ROFS on a read-only export, NFS3ERR_ACCES without write and
// search permission. The returned obj is open (close it) whenever its fd
// is not -1, even with an error status, for wcc_data.
func (c *call) openDir(fh *nfs3.FH) (obj, nfs3.Status) {
	o, st := c.open(fh)
	if st != nfs3.OK {
		return o, st
	}
	switch {
	case !o.isDir():
		st = nfs3.ErrNotDir
	case o.ro:
		st = nfs3.ErrROFS
	case !c.id.may(&o.st, mayWrite|mayExec):
		st = nfs3.ErrAccess
	}
	return o, st
}

// openChild opens name in directory o (O_PATH, never following it).
func openChild(o *obj, name string) (obj, error) {
	ch := obj{fd: -1, ex: o.ex, rootFD: o.rootFD, ro: o.ro}
	fd, err := unix.Openat(o.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return ch, err
	}
	ch.fd = fd
	if err := unix.Fstat(fd, &ch.st); err != nil {
		ch.close()
		return ch, err
	}
	kh, _, err := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		ch.close()
		return ch, err
	}
	ch.kh = kh
	return ch, nil
}

// created finishes the creation of name in o, given the descriptor of
// the new object (fd, not O_PATH, taken over; -1: name is opened O_PATH
// here): it makes the new object the caller's (group: the directory's if
// it is set-gid), applies sa, and fills r's handle and attributes. A
// directory made in a set-gid directory is set-gid too, whatever mode sa
// asks for (as Linux's inode_init_owner, which knfsd keeps by not
// applying MKDIR's mode again). The object is expected to be made with
// permission bits createPerm(sa): a mode it already has is not set again.
// On failure the object is removed. In a volume, the new inode and its
// blocks are charged (and charged back on failure).
func (c *call) created(o *obj, name string, fd int, sa *nfs3.Sattr, r *nfs3.CreateRes, isDir bool) nfs3.Status {
	uid, gid := c.id.uid, c.id.gid
	egid := c.s.egid // the group the object was made with, as Linux's inode_init_owner
	if o.st.Mode&unix.S_ISGID != 0 {
		gid, egid = o.st.Gid, o.st.Gid
		if isDir && sa.SetMode {
			a := *sa
			a.Mode |= unix.S_ISGID
			sa = &a
		}
	}
	ch := obj{fd: fd, file: fd >= 0, ex: o.ex, rootFD: o.rootFD, ro: o.ro}
	var err error
	if fd < 0 {
		ch.fd, err = unix.Openat(o.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			ch.fd = -1
		}
	}
	chown := func() error {
		return unix.Fchownat(ch.fd, "", int(uid), int(gid), unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
	}
	if err == nil && (uid != c.s.euid || gid != egid) {
		err = chown()
	}
	if err == nil {
		err = unix.Fstat(ch.fd, &ch.st)
	}
	if err == nil && (ch.st.Uid != uid || ch.st.Gid != gid) { // not the owner predicted (a grpid mount ...)
		if err = chown(); err == nil {
			err = unix.Fstat(ch.fd, &ch.st)
		}
	}
	if err == nil {
		ch.kh, _, err = unix.NameToHandleAt(ch.fd, "", unix.AT_EMPTY_PATH)
	}
	st := statusOf(err)
	charged := false
	if st == nfs3.OK {
		chargeNew(&ch, false)
		charged = true
		rest := *sa
		if !rest.SetUID && !rest.SetGID && rest.SetMode && ch.st.Mode&unix.S_IFMT != unix.S_IFLNK &&
			c.id.chmodMode(&ch.st, rest.Mode) == ch.st.Mode&0o7777 {
			rest.SetMode = false
		}
		if rest.SetMode || rest.SetUID || rest.SetGID || rest.SetSize ||
			rest.Atime.How != nfs3.DontChange || rest.Mtime.How != nfs3.DontChange {
			if st = c.applySattr(&ch, &rest); st == nfs3.OK {
				st = statusOf(unix.Fstat(ch.fd, &ch.st))
			}
		}
	}
	if st != nfs3.OK {
		flags := 0
		if isDir {
			flags = unix.AT_REMOVEDIR
		}
		if unix.Unlinkat(o.fd, name, flags) == nil && charged {
			chargeNew(&ch, true)
		}
		ch.close()
		return st
	}
	st = c.fillNew(&ch, r)
	ch.close()
	return st
}

// createPerm is the mode to make a new object with for sa: its
// permission bits; the set-ID and sticky bits are set after the new
// object is the caller's (created), as a chown clears them.
func createPerm(sa *nfs3.Sattr) uint32 {
	if !sa.SetMode {
		return 0
	}
	return sa.Mode & 0o777
}

// fillNew sets r's handle and attributes from ch (its stat current).
func (c *call) fillNew(ch *obj, r *nfs3.CreateRes) nfs3.Status {
	fh, err := c.s.seal.fhOf(ch.ex.id, ch.kh)
	if err != nil {
		return statusOf(err)
	}
	r.Obj = nfs3.Handle(fh)
	r.ObjAttr = nfs3.Attrs(fattr(&ch.st))
	return nfs3.OK
}

// exclVerf splits a create verifier into the atime and mtime seconds that
// store it, as knfsd does (RFC 1813 section 3.3.8).
func exclVerf(v nfs3.CreateVerf) (atime, mtime int64) {
	return int64(binary.BigEndian.Uint32(v[4:]) & 0x7fffffff), int64(binary.BigEndian.Uint32(v[:4]) & 0x7fffffff)
}

// create is CREATE (RFC 1813 section 3.3.8): UNCHECKED (an existing
// regular file is kept, truncated if the size is given), GUARDED
// (NFS3ERR_EXIST if the name exists) or EXCLUSIVE (the verifier is kept in
// atime/mtime; a retransmission with the same verifier succeeds).
func (c *call) create(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.CreateArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.CreateRes
	o, st := c.openDir(&a.Where.Dir)
	if st == nfs3.OK {
		st = checkName(a.Where.Name, nfs3.ErrExist)
	}
	if st == nfs3.OK {
		st = c.doCreate(&o, &a, &r)
		chargeDir(&o)
	}
	r.DirWcc = o.done()
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}

func (c *call) doCreate(o *obj, a *nfs3.CreateArgs, r *nfs3.CreateRes) nfs3.Status {
	name := a.Where.Name
	sa := &a.How.Attr
	if a.How.Mode == nfs3.Exclusive {
		at, mt := exclVerf(a.How.Verf)
		sa = &nfs3.Sattr{
			Atime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Seconds: uint32(at)}},
			Mtime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Seconds: uint32(mt)}},
		}
	}
	fd, err := unix.Openat(o.fd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, createPerm(sa))
	if err == nil {
		return c.created(o, name, fd, sa, r, false)
	}
	if err != unix.EEXIST || a.How.Mode == nfs3.Guarded {
		return statusOf(err)
	}
	ch, err := openChild(o, name)
	if err != nil {
		return statusOf(err)
	}
	defer ch.close()
	if ch.st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nfs3.ErrExist
	}
	if a.How.Mode == nfs3.Exclusive {
		at, mt := exclVerf(a.How.Verf)
		if ch.st.Atim.Sec != at || ch.st.Mtim.Sec != mt {
			return nfs3.ErrExist
		}
		return c.fillNew(&ch, r)
	}
	if a.How.Attr.SetSize { // UNCHECKED on an existing file: only the size applies
		if st := c.applySattr(&ch, &nfs3.Sattr{SetSize: true, Size: a.How.Attr.Size}); st != nfs3.OK {
			return st
		}
		if err := unix.Fstat(ch.fd, &ch.st); err != nil {
			return statusOf(err)
		}
	}
	return c.fillNew(&ch, r)
}

// mkdir is MKDIR (RFC 1813 section 3.3.9).
func (c *call) mkdir(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.MkdirArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	c.makeEntry(b, &a.Where, &a.Attr, true, true, 0, func(dir int) nfs3.Status {
		return statusOf(unix.Mkdirat(dir, a.Where.Name, createPerm(&a.Attr)))
	})
	return nil
}

// symlink is SYMLINK (RFC 1813 section 3.3.10). The target (DDP-eligible)
// is stored verbatim; the mode of a symlink is ignored, as on Linux.
func (c *call) symlink(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.SymlinkArgs
	payload := c.req.ArgPayload
	if v := c.req.ArgPayloadVec; v != nil {
		payload = bytes.Join(v, nil) // placed in pieces: a path is short
	}
	if err := a.Decode(d, payload, c.req.Placed()); err != nil {
		return garbage(err)
	}
	sa := a.Attr
	sa.SetMode = false
	c.makeEntry(b, &a.Where, &sa, false, true, len(a.Path), func(dir int) nfs3.Status {
		return statusOf(unix.Symlinkat(string(a.Path), dir, a.Where.Name))
	})
	return nil
}

// mknod is MKNOD (RFC 1813 section 3.3.11): character and block devices
// need uid 0 (NFS3ERR_PERM), sockets and FIFOs anyone; other types are
// NFS3ERR_BADTYPE.
func (c *call) mknod(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.MknodArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	c.makeEntry(b, &a.Where, &a.Attr, false, false, 0, func(dir int) nfs3.Status {
		var mode uint32
		var dev uint64
		switch a.Type {
		case nfs3.TypeChr, nfs3.TypeBlk:
			mode = unix.S_IFCHR
			if a.Type == nfs3.TypeBlk {
				mode = unix.S_IFBLK
			}
			dev = unix.Mkdev(a.Spec.Major, a.Spec.Minor)
			if c.id.uid != 0 {
				return nfs3.ErrPerm
			}
		case nfs3.TypeSock:
			mode = unix.S_IFSOCK
		case nfs3.TypeFIFO:
			mode = unix.S_IFIFO
		default:
			return nfs3.ErrBadType
		}
		return statusOf(unix.Mknodat(dir, a.Where.Name, mode|createPerm(&a.Attr), int(dev)))
	})
	return nil
}

// makeEntry is what MKDIR, SYMLINK and MKNOD share: it opens the
// directory, checks the name, reserves the new object's blocks in a volume
// with a quota when reserve (reserveNew: a directory's block, a symlink
// target of symlinkLen bytes; NFS3ERR_NOSPC past the quota), makes the
// entry with mk (given the directory's fd; a failure status is the
// answer), sets its attributes and fills the result (created), charges
// the directory's growth and encodes the CreateRes with the directory's
// wcc_data.
func (c *call) makeEntry(b *sunrpc.Builder, where *nfs3.DirOpArgs, sa *nfs3.Sattr, isDir, reserve bool, symlinkLen int, mk func(dir int) nfs3.Status) {
	var r nfs3.CreateRes
	o, st := c.openDir(&where.Dir)
	if st == nfs3.OK {
		st = checkName(where.Name, nfs3.ErrExist)
	}
	var est int64
	if st == nfs3.OK && reserve {
		est, st = reserveNew(&o, isDir, symlinkLen)
	}
	if st == nfs3.OK {
		st = mk(o.fd)
		if st == nfs3.OK {
			st = c.created(&o, where.Name, -1, sa, &r, isDir)
		}
		chargeDir(&o)
		release(&o, est)
	}
	r.DirWcc = o.done()
	r.Status = st
	r.Encode(&b.Encoder)
}

// link is LINK (RFC 1813 section 3.3.15), within one export
// (NFS3ERR_XDEV otherwise). As with fs.protected_hardlinks, a caller
// that does not own the file needs read and write permission on it.
func (c *call) link(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.LinkArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.LinkRes
	f, st := c.open(&a.File)
	if st == nfs3.OK {
		defer f.close()
		var o obj
		o, st = c.openDir(&a.Link.Dir)
		if st == nfs3.OK {
			st = checkName(a.Link.Name, nfs3.ErrExist)
		}
		if st == nfs3.OK {
			switch {
			case o.ex.id != f.ex.id || o.st.Dev != f.st.Dev:
				st = nfs3.ErrXDev
			case f.isDir():
				st = nfs3.ErrIsDir
			case c.id.uid != 0 && c.id.uid != f.st.Uid &&
				(f.st.Mode&unix.S_IFMT != unix.S_IFREG || !c.id.may(&f.st, mayRead|mayWrite)):
				st = nfs3.ErrPerm
			default:
				st = statusOf(unix.Linkat(f.fd, "", o.fd, a.Link.Name, unix.AT_EMPTY_PATH))
				chargeDir(&o)
			}
		}
		r.LinkDirWcc = o.done()
		r.FileAttr = postAttr(f.fd)
	}
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}
