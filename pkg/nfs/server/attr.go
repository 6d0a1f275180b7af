package server

import (
	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// getattr is GETATTR (RFC 1813 section 3.3.1).
func (c *call) getattr(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.GetattrArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.GetattrRes
	o, st := c.open(&a.Object)
	if st == nfs3.OK {
		r.Attr = fattr(&o.st)
		o.close()
	}
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}

// setattr is SETATTR (RFC 1813 section 3.3.2): with a guard, NFS3ERR_NOT_SYNC
// when the object's ctime differs from the guard's.
func (c *call) setattr(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.SetattrArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.SetattrRes
	o, st := c.open(&a.Object)
	if st == nfs3.OK {
		pre := wccAttr(&o.st) // applySattr refreshes o.st
		switch {
		case a.Guard.Check && nfsTime(o.st.Ctim) != a.Guard.Ctime:
			st = nfs3.ErrNotSync
		case o.ro:
			st = nfs3.ErrROFS
		default:
			st = c.applySattr(&o, &a.Attr)
		}
		r.Wcc = nfs3.WccData{Before: pre, After: postAttr(o.fd)}
		o.close()
	}
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}

// applySattr applies sa to o with the caller's rights, as the kernel's
// notify_change/setattr_prepare would for that user: owner and group
// changes as mayChown, mode changes the owner or
// uid 0, size write permission (or ownership), times set to the client's
// time the owner or uid 0, to the server's time write permission. In a
// volume, growing the size past the quota is errQuota (NFS3ERR_NOSPC).
// As on a local file system, a chown clears the set-user-ID bit (and
// set-group-ID with group execute), and a size change by a caller other
// than root clears them as a WRITE does (identity.setIDAfterWrite).
func (c *call) applySattr(o *obj, sa *nfs3.Sattr) nfs3.Status {
	id := &c.id
	st := &o.st
	owner := id.uid == 0 || id.uid == st.Uid
	isLnk := st.Mode&unix.S_IFMT == unix.S_IFLNK
	if sa.SetUID || sa.SetGID {
		if s := id.mayChown(st, sa); s != nfs3.OK {
			return s
		}
		uid, gid := -1, -1
		if sa.SetUID {
			uid = int(sa.UID)
		}
		if sa.SetGID {
			gid = int(sa.GID)
		}
		// also to the same ids: the kernel then clears the set-user-ID
		// and set-group-ID bits, as chown(2) does
		if err := unix.Fchownat(o.fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return statusOf(err)
		}
		unix.Fstat(o.fd, st)
	}
	if sa.SetMode && !isLnk {
		if !owner {
			return nfs3.ErrPerm
		}
		mode := id.chmodMode(st, sa.Mode)
		var err error
		if o.file {
			err = unix.Fchmod(o.fd, mode)
		} else {
			err = unix.Fchmodat(unix.AT_FDCWD, procPath(o.fd), mode, 0)
		}
		if err != nil {
			return statusOf(err)
		}
	}
	if sa.SetSize {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
		case unix.S_IFDIR:
			return nfs3.ErrIsDir
		default:
			return nfs3.ErrInval
		}
		if id.uid != st.Uid && !id.may(st, mayWrite) {
			return nfs3.ErrAccess
		}
		if sa.Size > 1<<63-1 {
			return nfs3.ErrFBig
		}
		fd := o.fd
		if !o.file {
			// the open-file cache's descriptor for writing, as WRITE
			// uses: an open(O_TRUNC) is most often followed by WRITEs
			f, err := c.ioFile(o, c.s.files.get(o.kh, unix.O_WRONLY), unix.O_WRONLY)
			if err != nil {
				return statusOf(err)
			}
			defer c.s.files.release(f)
			fd = f.val
		}
		// a caller other than root loses the set-ID bits, as the
		// kernel's do_truncate clears them for one without CAP_FSETID
		// (the server truncates as root)
		if sa.SetMode {
			unix.Fstat(o.fd, st)
		}
		if mode, drop := id.setIDAfterWrite(st); drop {
			if err := unix.Fchmod(fd, mode); err != nil {
				return statusOf(err)
			}
		}
		if s := c.quotaTruncate(o, fd, int64(sa.Size)); s != nfs3.OK {
			return s
		}
	}
	if sa.Atime.How != nfs3.DontChange || sa.Mtime.How != nfs3.DontChange {
		ts := [2]unix.Timespec{timeSpec(sa.Atime), timeSpec(sa.Mtime)}
		client := sa.Atime.How == nfs3.SetToClientTime || sa.Mtime.How == nfs3.SetToClientTime
		switch {
		case owner:
		case client:
			return nfs3.ErrPerm
		case !id.may(st, mayWrite):
			return nfs3.ErrAccess
		}
		if err := unix.UtimesNanoAt(o.fd, "", ts[:], unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return statusOf(err)
		}
	}
	return nfs3.OK
}

func timeSpec(t nfs3.SetTime) unix.Timespec {
	switch t.How {
	case nfs3.SetToServerTime:
		return unix.Timespec{Nsec: unix.UTIME_NOW}
	case nfs3.SetToClientTime:
		return unix.Timespec{Sec: int64(t.Time.Seconds), Nsec: int64(t.Time.Nseconds)}
	}
	return unix.Timespec{Nsec: unix.UTIME_OMIT}
}

// access is ACCESS (RFC 1813 section 3.3.4), answered from the mode bits
// for the caller; a read-only export grants no MODIFY, EXTEND or DELETE.
func (c *call) access(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.AccessArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.AccessRes
	o, st := c.open(&a.Object)
	if st == nfs3.OK {
		r.Attr = o.attr()
		check := func(bit, mask uint32) {
			if a.Access&bit != 0 && c.id.may(&o.st, mask) {
				r.Access |= bit
			}
		}
		check(nfs3.AccessRead, mayRead)
		if o.isDir() {
			check(nfs3.AccessLookup, mayExec)
			check(nfs3.AccessModify, mayWrite|mayExec)
			check(nfs3.AccessExtend, mayWrite|mayExec)
			check(nfs3.AccessDelete, mayWrite|mayExec)
		} else {
			check(nfs3.AccessModify, mayWrite)
			check(nfs3.AccessExtend, mayWrite)
			check(nfs3.AccessExecute, mayExec)
		}
		if o.ro {
			r.Access &^= nfs3.AccessModify | nfs3.AccessExtend | nfs3.AccessDelete
		}
		o.close()
	}
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}
