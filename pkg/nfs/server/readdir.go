package server

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

const getdentsBuf = 32 << 10

// cookieVerf is the READDIR cookie verifier of a directory: its mtime
// (seconds, nanoseconds), so that it changes when the directory does.
func cookieVerf(st *unix.Stat_t) nfs3.CookieVerf {
	var v nfs3.CookieVerf
	binary.BigEndian.PutUint32(v[:4], uint32(st.Mtim.Sec))
	binary.BigEndian.PutUint32(v[4:], uint32(st.Mtim.Nsec))
	return v
}

// openReaddir opens fh as a directory the caller may list, and checks the
// cookie and its verifier: a non-zero cookie with a verifier that is
// neither zero nor the directory's current one is NFS3ERR_BAD_COOKIE.
func (c *call) openReaddir(fh *nfs3.FH, cookie uint64, verf nfs3.CookieVerf) (obj, nfs3.Status) {
	o, st := c.open(fh)
	if st != nfs3.OK {
		return o, st
	}
	switch {
	case !o.isDir():
		return o, nfs3.ErrNotDir
	case !c.id.may(&o.st, mayRead):
		return o, nfs3.ErrAccess
	case cookie != 0 && verf != (nfs3.CookieVerf{}) && verf != cookieVerf(&o.st):
		return o, nfs3.ErrBadCookie
	}
	return o, nfs3.OK
}

// dirEntries calls f for each entry of directory o from cookie (a
// getdents64 offset, 0 for the start) with its inode number, name and
// cookie (the offset after it) until f returns false. It reports whether
// the end was reached.
func dirEntries(o *obj, cookie uint64, f func(ino uint64, name string, next uint64) bool) (eof bool, err error) {
	fd, err := o.reopen(unix.O_RDONLY | unix.O_DIRECTORY)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	if _, err := unix.Seek(fd, int64(cookie), 0); err != nil {
		return false, err
	}
	bp := getBuf(getdentsBuf)
	defer bp.free()
	buf := bp.b[:getdentsBuf]
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, err
		}
		if n <= 0 {
			return true, nil
		}
		for p := 0; p+19 <= n; {
			ino := binary.NativeEndian.Uint64(buf[p:])
			off := binary.NativeEndian.Uint64(buf[p+8:])
			reclen := int(binary.NativeEndian.Uint16(buf[p+16:]))
			if reclen < 19 || p+reclen > n {
				return false, unix.EIO
			}
			nb := buf[p+19 : p+reclen]
			l := 0
			for l < len(nb) && nb[l] != 0 {
				l++
			}
			if !f(ino, string(nb[:l]), off) {
				return false, nil
			}
			p += reclen
		}
	}
}

// listed is the status of a READDIR or READDIRPLUS reply that holds n
// entries, having reached the directory's end if eof, after dirEntries
// returned err: err's status, NFS3ERR_TOOSMALL if not even one entry fit
// the count (RFC 1813 sections 3.3.16, 3.3.17), else NFS3_OK.
func listed(err error, n int, eof bool) nfs3.Status {
	switch {
	case err != nil:
		return statusOf(err)
	case n == 0 && !eof:
		return nfs3.ErrTooSmall
	}
	return nfs3.OK
}

// readdir is READDIR (RFC 1813 section 3.3.16): entries with offset
// cookies until the reply would exceed count bytes (NFS3ERR_TOOSMALL if
// not even one fits).
func (c *call) readdir(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.ReaddirArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.ReaddirRes
	o, st := c.openReaddir(&a.Dir, a.Cookie, a.Verf)
	if o.fd >= 0 {
		defer o.close()
		r.DirAttr = o.attr()
	}
	if st == nfs3.OK {
		r.Verf = cookieVerf(&o.st)
		size, max := r.ResOKSize(), int(min(a.Count, MaxIO))
		eof, err := dirEntries(&o, a.Cookie, func(ino uint64, name string, next uint64) bool {
			if name == ".." && o.isExportRoot() {
				ino = o.st.Ino
			}
			e := nfs3.Entry{FileID: ino, Name: name, Cookie: next}
			if size+e.Size() > max {
				return false
			}
			size += e.Size()
			r.Entries = append(r.Entries, e)
			return true
		})
		r.EOF = eof
		st = listed(err, len(r.Entries), eof)
	}
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}

// readdirplus is READDIRPLUS (RFC 1813 section 3.3.17): READDIR with each
// entry's attributes and handle, within maxcount bytes (dircount, a hint,
// is not used to stop earlier).
func (c *call) readdirplus(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.ReaddirplusArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.ReaddirplusRes
	o, st := c.openReaddir(&a.Dir, a.Cookie, a.Verf)
	if o.fd >= 0 {
		defer o.close()
		r.DirAttr = o.attr()
	}
	if st == nfs3.OK {
		r.Verf = cookieVerf(&o.st)
		size, max := r.ResOKSize(), int(min(a.MaxCount, MaxIO))
		canLookup := c.id.may(&o.st, mayExec)
		var est unix.Stat_t
		eof, err := dirEntries(&o, a.Cookie, func(ino uint64, name string, next uint64) bool {
			e := nfs3.EntryPlus{FileID: ino, Name: name, Cookie: next}
			if canLookup {
				if fh, s := c.lookupName(&o, name, &est); s == nfs3.OK {
					e.FileID = est.Ino
					e.Attr = nfs3.Attrs(fattr(&est))
					e.Handle = nfs3.Handle(fh)
				}
			}
			if size+e.Size() > max {
				return false
			}
			size += e.Size()
			r.Entries = append(r.Entries, e)
			return true
		})
		r.EOF = eof
		st = listed(err, len(r.Entries), eof)
	}
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}
