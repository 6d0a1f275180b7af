package server

import (
	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// mayDelete checks the sticky bit of directory o for removing name (the
// kernel's check_sticky): in a sticky directory only uid 0, the owner of
// the directory or of the entry may remove it (NFS3ERR_PERM). It also
// returns the entry's stat.
func (c *call) mayDelete(o *obj, name string, st *unix.Stat_t) nfs3.Status {
	if err := unix.Fstatat(o.fd, name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return statusOf(err)
	}
	if c.sticky(o) && c.id.uid != st.Uid {
		return nfs3.ErrPerm
	}
	return nfs3.OK
}

// sticky reports whether the sticky bit of directory o limits the caller
// to removing its own entries (it is neither uid 0 nor o's owner).
func (c *call) sticky(o *obj) bool {
	return o.st.Mode&unix.S_ISVTX != 0 && c.id.uid != 0 && c.id.uid != o.st.Uid
}

// remove is REMOVE (RFC 1813 section 3.3.12): a non-directory
// (NFS3ERR_ISDIR for a directory).
func (c *call) remove(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.RemoveArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.RemoveRes
	o, st := c.openDir(&a.Object.Dir)
	if st == nfs3.OK {
		st = checkName(a.Object.Name, nfs3.ErrIsDir)
	}
	seq, mapped := c.s.rmap.mark()
	fseq, open := c.s.files.mark()
	if st == nfs3.OK && o.ex.vol == nil && !mapped && !open && !c.sticky(&o) {
		// nothing needs the entry's stat: unlink(2) refuses a
		// directory (EISDIR)
		if st = statusOf(unix.Unlinkat(o.fd, a.Object.Name, 0)); st == nfs3.OK {
			c.s.rmap.forgetSince(seq)
			c.s.files.forgetSince(fseq)
		}
	} else if st == nfs3.OK {
		var est unix.Stat_t
		if st = c.mayDelete(&o, a.Object.Name, &est); st == nfs3.OK {
			if est.Mode&unix.S_IFMT == unix.S_IFDIR {
				st = nfs3.ErrIsDir
			} else if st = c.removeEntry(&o, a.Object.Name, &est, func() error {
				return unix.Unlinkat(o.fd, a.Object.Name, 0)
			}); st == nfs3.OK {
				chargeDir(&o)
			}
		}
	}
	r.DirWcc = o.done()
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}

// rmdir is RMDIR (RFC 1813 section 3.3.13): an empty directory
// (NFS3ERR_NOTEMPTY, NFS3ERR_NOTDIR; "." is NFS3ERR_INVAL, ".."
// NFS3ERR_NOTEMPTY, as rmdir(2)).
func (c *call) rmdir(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.RmdirArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.RemoveRes
	o, st := c.openDir(&a.Object.Dir)
	if st == nfs3.OK {
		switch a.Object.Name {
		case ".":
			st = nfs3.ErrInval
		case "..":
			st = nfs3.ErrNotEmpty
		default:
			st = checkName(a.Object.Name, nfs3.ErrInval)
		}
	}
	if st == nfs3.OK && o.ex.vol == nil && !c.sticky(&o) {
		// nothing needs the entry's stat: rmdir(2) refuses a
		// non-directory (ENOTDIR)
		st = statusOf(unix.Unlinkat(o.fd, a.Object.Name, unix.AT_REMOVEDIR))
	} else if st == nfs3.OK {
		var est unix.Stat_t
		if st = c.mayDelete(&o, a.Object.Name, &est); st == nfs3.OK {
			if st = statusOf(unix.Unlinkat(o.fd, a.Object.Name, unix.AT_REMOVEDIR)); st == nfs3.OK {
				chargeGone(&o, &est)
				chargeDir(&o)
			}
		}
	}
	r.DirWcc = o.done()
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}

// rename is RENAME (RFC 1813 section 3.3.14), within one export
// (NFS3ERR_XDEV otherwise), with the sticky-bit checks on both names and,
// for a directory moving to another parent, write permission on it (its
// ".." changes), as the kernel's may_delete and vfs_rename.
func (c *call) rename(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.RenameArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.RenameRes
	from, st := c.openDir(&a.From.Dir)
	var to obj
	to.fd = -1
	if st == nfs3.OK {
		to, st = c.openDir(&a.To.Dir)
	}
	if st == nfs3.OK {
		if st = checkName(a.From.Name, nfs3.ErrInval); st == nfs3.OK {
			st = checkName(a.To.Name, nfs3.ErrInval)
		}
	}
	if st == nfs3.OK && (from.ex.id != to.ex.id || from.st.Dev != to.st.Dev) {
		st = nfs3.ErrXDev
	}
	if st == nfs3.OK {
		var sst, tst unix.Stat_t
		replaced := false
		st = c.mayDelete(&from, a.From.Name, &sst)
		if st == nfs3.OK {
			switch ts := c.mayDelete(&to, a.To.Name, &tst); ts {
			case nfs3.OK:
				replaced = tst.Ino != sst.Ino || tst.Dev != sst.Dev
			case nfs3.ErrNoEnt:
			default:
				st = ts
			}
		}
		if st == nfs3.OK && sst.Mode&unix.S_IFMT == unix.S_IFDIR && from.st.Ino != to.st.Ino && !c.id.may(&sst, mayWrite) {
			st = nfs3.ErrAccess
		}
		if st == nfs3.OK {
			rename := func() error { return unix.Renameat(from.fd, a.From.Name, to.fd, a.To.Name) }
			if replaced {
				st = c.removeEntry(&to, a.To.Name, &tst, rename)
			} else {
				st = statusOf(rename())
			}
			if st == nfs3.OK {
				chargeDir(&from)
				if to.st.Ino != from.st.Ino {
					chargeDir(&to)
				}
			}
		}
	}
	if from.fd >= 0 {
		r.FromDirWcc = from.wcc()
		from.close()
	}
	if to.fd >= 0 {
		r.ToDirWcc = to.wcc()
		to.close()
	}
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}
