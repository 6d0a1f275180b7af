package server

import (
	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// lookup is LOOKUP (RFC 1813 section 3.3.3). It needs search permission
// on the directory, never follows a symlink, and ".." at an export root is
// the root itself.
func (c *call) lookup(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.LookupArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.LookupRes
	o, st := c.open(&a.What.Dir)
	if st == nfs3.OK {
		r.DirAttr = o.attr()
		var fh nfs3.FH
		var ost unix.Stat_t
		fh, st = c.lookupName(&o, a.What.Name, &ost)
		if st == nfs3.OK {
			r.Object, r.ObjAttr = fh, nfs3.Attrs(fattr(&ost))
		}
		o.close()
	}
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}

// lookupName resolves name in directory o into a handle and its stat.
func (c *call) lookupName(o *obj, name string, ost *unix.Stat_t) (nfs3.FH, nfs3.Status) {
	switch {
	case !o.isDir():
		return nfs3.FH{}, nfs3.ErrNotDir
	case !c.id.may(&o.st, mayExec):
		return nfs3.FH{}, nfs3.ErrAccess
	case len(name) > nfs3.MaxNameLen:
		return nfs3.FH{}, nfs3.ErrNameTooLong
	case name == "":
		return nfs3.FH{}, nfs3.ErrNoEnt
	}
	if checkName(name, nfs3.OK) != nfs3.OK {
		return nfs3.FH{}, nfs3.ErrNoEnt
	}
	if name == "." || (name == ".." && o.isExportRoot()) {
		*ost = o.st
		fh, err := c.s.seal.makeFH(o.ex.id, o.fd, "", unix.AT_EMPTY_PATH)
		return fh, statusOf(err)
	}
	if err := unix.Fstatat(o.fd, name, ost, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nfs3.FH{}, statusOf(err)
	}
	if ost.Dev != o.st.Dev {
		return nfs3.FH{}, nfs3.ErrXDev // a mount point: not crossed (no crossmnt)
	}
	fh, err := c.s.seal.makeFH(o.ex.id, o.fd, name, 0)
	return fh, statusOf(err)
}

// readlink is READLINK (RFC 1813 section 3.3.5): the target verbatim, as a
// DDP-eligible result.
func (c *call) readlink(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.ReadlinkArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	o, st := c.open(&a.Symlink)
	var buf []byte
	n := 0
	if st == nfs3.OK {
		defer o.close()
		if o.st.Mode&unix.S_IFMT != unix.S_IFLNK {
			st = nfs3.ErrInval
		} else {
			bp := getBuf(nfs3.MaxPathLen + 1)
			buf = bp.b
			b.AfterSend(bp.free)
			var err error
			n, err = unix.Readlinkat(o.fd, "", buf)
			if err != nil {
				st = statusOf(err)
			} else if n > nfs3.MaxPathLen {
				st = nfs3.ErrNameTooLong
			}
		}
	}
	res := nfs3.ReadlinkRes{Status: st, Attr: o.attr()}
	if st == nfs3.OK {
		res.Path = buf[:n]
	}
	if p := res.Encode(&b.Encoder); st == nfs3.OK {
		b.MarkPayload(p) // the DDP-eligible result (RFC 8267 section 4)
	}
	return nil
}
