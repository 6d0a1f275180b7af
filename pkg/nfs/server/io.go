package server

import (
	"errors"
	"io"
	"math/bits"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Buffer pools by power-of-two size class, 4 KiB to 1 MiB, so that READ
// does not allocate in steady state.
const (
	minClass = 12
	maxClass = 20
)

var bufPools [maxClass - minClass + 1]sync.Pool // *pbuf

// pbuf is a pooled buffer; free (made once per buffer) returns it to its
// pool, so that handing it to Builder.AfterSend does not allocate.
type pbuf struct {
	b    []byte
	free func()
}

func sizeClass(n int) int {
	if n <= 1<<minClass {
		return 0
	}
	return bits.Len(uint(n-1)) - minClass
}

// getBuf returns a pooled buffer of at least n bytes (n <= MaxIO).
func getBuf(n int) *pbuf {
	c := sizeClass(n)
	if p, ok := bufPools[c].Get().(*pbuf); ok {
		return p
	}
	p := &pbuf{b: make([]byte, 1<<(c+minClass))}
	p.free = func() { bufPools[c].Put(p) }
	return p
}

// fdReader is an io.ReaderAt over a file descriptor (pread(2)).
type fdReader int

func (f fdReader) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Pread(int(f), p[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.EOF
		}
		n += m
	}
	return n, nil
}

// read is READ (RFC 1813 section 3.3.6). The data (at most MaxIO bytes)
// is returned as the DDP-eligible result straight from a mapping of the
// file (readMap, Options.ReadMapBytes: the transport sends the page
// cache's pages, no copy), or else read into a pooled buffer; the window or
// the buffer is released after the transport sent it. The file is read
// through the server's open-file cache (fileCache), as WRITE writes it and
// COMMIT syncs it. As knfsd,
// the owner may read whatever the mode, and so may a caller with execute
// permission (NFSD_MAY_READ_IF_EXEC: clients read the programs they run;
// they check read permission at open themselves, with ACCESS).
func (c *call) read(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.ReadArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	o, f, st := c.openIO(&a.File, unix.O_RDONLY)
	defer o.close()
	var data []byte
	eof := false
	if st == nfs3.OK {
		switch {
		case o.isDir():
			st = nfs3.ErrIsDir
		case o.st.Mode&unix.S_IFMT != unix.S_IFREG:
			st = nfs3.ErrInval
		case o.st.Uid != c.id.uid && !c.id.may(&o.st, mayRead) && !c.id.may(&o.st, mayExec):
			// execute permission is enough: a client reads the
			// program it runs (as knfsd's NFSD_MAY_READ_IF_EXEC)
			st = nfs3.ErrAccess
		}
	}
	if st == nfs3.OK {
		count := min(int(a.Count), MaxIO)
		var err error
		if f, err = c.ioFile(&o, f, unix.O_RDONLY); err != nil {
			st = statusOf(err)
		} else {
			fd := f.val
			var n int
			mapped := false
			if count > 0 && a.Offset < 1<<63 {
				data, mapped = c.s.rmap.readMapped(fd, &o.st, int64(a.Offset), count, b)
				n = len(data)
			}
			if count > 0 && a.Offset < 1<<63 && !mapped {
				bp := getBuf(count)
				b.AfterSend(bp.free)
				n, err = fdReader(fd).ReadAt(bp.b[:count], int64(a.Offset))
				data = bp.b[:n]
			}
			if !mapped {
				unix.Fstat(fd, &o.st)
			}
			if err != nil && !errors.Is(err, io.EOF) {
				st = statusOf(err)
			}
			eof = a.Offset+uint64(n) >= uint64(o.st.Size)
		}
	}
	if f != nil {
		c.s.files.release(f)
	}
	res := nfs3.ReadRes{Status: st, Attr: o.attr(), EOF: eof, Data: data}
	if p := res.Encode(&b.Encoder); st == nfs3.OK {
		b.MarkPayload(p) // the DDP-eligible result (RFC 8267 section 4)
	}
	return nil
}

// write is WRITE (RFC 1813 section 3.3.7). The data is taken with
// sunrpc.Request.Payload (inline, or pulled by an RDMA transport). UNSTABLE
// data is not synced (COMMIT does), DATA_SYNC is fdatasync'ed, FILE_SYNC
// fsync'ed (syncStable, inside the quota accounting, so that the blocks
// the sync allocates are counted); the reply carries the instance's write
// verifier. In a volume, a write whose estimated growth (volumes.Volume.Write)
// does not fit the quota fails with NFS3ERR_NOSPC
// and writes nothing. A write by a caller other than root clears the file's
// set-user-ID bit (and set-group-ID, see identity.setIDAfterWrite) first, as
// a local write(2) without CAP_FSETID would.
func (c *call) write(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.WriteArgs
	var err error
	vec := c.req.ArgPayloadVec // placed in several receive buffers: written with pwritev
	if vec != nil {
		err = a.DecodeVec(d, vec, MaxIO)
	} else {
		err = a.DecodeMax(d, c.req.ArgPayload, c.req.ArgPayload != nil, MaxIO)
	}
	if err != nil {
		return garbage(err)
	}
	fh, off, stable, data := a.File, a.Offset, a.Stable, a.Data
	size := len(data)
	if vec != nil {
		size = c.req.ArgPayloadLen()
	}
	var r nfs3.WriteRes
	o, f, st := c.openIO(&fh, unix.O_WRONLY)
	defer o.close()
	if st == nfs3.OK {
		switch {
		case o.ro:
			st = nfs3.ErrROFS
		case o.isDir():
			st = nfs3.ErrIsDir
		case o.st.Mode&unix.S_IFMT != unix.S_IFREG:
			st = nfs3.ErrInval
		case o.st.Uid != c.id.uid && !c.id.may(&o.st, mayWrite):
			st = nfs3.ErrAccess
		case off > 1<<63-1-uint64(size):
			st = nfs3.ErrFBig
		}
	}
	if st == nfs3.OK {
		f, err = c.ioFile(&o, f, unix.O_WRONLY)
		if err == nil {
			if mode, drop := c.id.setIDAfterWrite(&o.st); drop && size > 0 {
				err = unix.Fchmod(f.val, mode)
			}
		}
		if err != nil {
			st = statusOf(err)
		} else {
			fd, n := f.val, 0
			overQuota, err := c.quotaWrite(&o, fd, int64(off), int64(size), stable, func() error {
				var err error
				if vec != nil {
					n, err = pwritevAll(fd, vec, int64(off))
					return err
				}
				for n < len(data) && err == nil {
					var m int
					m, err = unix.Pwrite(fd, data[n:], int64(off)+int64(n))
					if err == unix.EINTR {
						err = nil
					}
					n += max(m, 0)
				}
				return err
			})
			if overQuota {
				err = errQuota
			}
			r.Committed = stable
			r.Count = uint32(n)
			st = statusOf(err)
		}
	}
	if f != nil {
		defer c.s.files.release(f)
	}
	if o.fd >= 0 {
		r.Wcc = o.wcc()
	}
	r.Status, r.Verf = st, c.s.wverf
	r.Encode(&b.Encoder)
	return nil
}

// commit is COMMIT (RFC 1813 section 3.3.21): fsync(2) of the whole file
// (the range is not narrowed), with the instance's write verifier.
func (c *call) commit(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.CommitArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.CommitRes
	// the file WRITE left open in the cache, if any; else opened for
	// reading only (no write access needed, and none taken from a running
	// program: ETXTBSY)
	o, f, st := c.openIO(&a.File, unix.O_WRONLY)
	if f != nil {
		defer c.s.files.release(f)
	}
	if st == nfs3.OK {
		defer o.close()
		switch {
		case o.ro:
			st = nfs3.ErrROFS
		case o.isDir():
			st = nfs3.ErrIsDir
		case o.st.Mode&unix.S_IFMT != unix.S_IFREG:
			st = nfs3.ErrInval
		case f != nil:
			st = statusOf(c.syncCharged(&o, f.val))
		default:
			fd, err := o.reopen(unix.O_RDONLY)
			if err == nil {
				err = c.syncCharged(&o, fd)
				unix.Close(fd)
			}
			st = statusOf(err)
		}
		r.Wcc = o.wcc()
	}
	r.Status, r.Verf = st, c.s.wverf
	r.Encode(&b.Encoder)
	return nil
}

// pwritevAll writes the pieces of vec, in order, at off of fd with
// pwritev(2), again after a short write or EINTR, and returns the bytes
// written: the WRITE data a transport placed in several receive buffers
// goes to the file from where it landed.
func pwritevAll(fd int, vec [][]byte, off int64) (int, error) {
	n := 0
	for len(vec) > 0 {
		m, err := unix.Pwritev(fd, vec, off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, unix.EIO
		}
		n += m
		for len(vec) > 0 && m >= len(vec[0]) {
			m -= len(vec[0])
			vec = vec[1:]
		}
		if m > 0 {
			vec = append([][]byte{vec[0][m:]}, vec[1:]...)
		}
	}
	return n, nil
}
