package server

import (
	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// fsstat is FSSTAT (RFC 1813 section 3.3.18), from statfs(2); in a volume
// with a quota, tbytes is the quota and fbytes = abytes = max(0, quota -
// used), the file counts still the file system's.
func (c *call) fsstat(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.FsstatArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.FsstatRes
	o, st := c.open(&a.FSRoot)
	if st == nfs3.OK {
		r.Attr = o.attr()
		var sf unix.Statfs_t
		if err := unix.Fstatfs(o.fd, &sf); err != nil {
			st = statusOf(err)
		} else {
			bs := uint64(sf.Bsize)
			r.TBytes, r.FBytes, r.ABytes = sf.Blocks*bs, sf.Bfree*bs, sf.Bavail*bs
			r.TFiles, r.FFiles, r.AFiles = sf.Files, sf.Ffree, sf.Ffree
			if v := o.ex.vol; v != nil {
				if q, used := v.Quota(); q > 0 {
					free := uint64(max(0, q-used))
					r.TBytes, r.FBytes, r.ABytes = uint64(q), free, free
				}
			}
		}
		o.close()
	}
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}

// fsinfo is FSINFO (RFC 1813 section 3.3.19): 1 MiB reads and writes.
func (c *call) fsinfo(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.FsinfoArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.FsinfoRes
	o, st := c.open(&a.FSRoot)
	if st == nfs3.OK {
		r.Attr = o.attr()
		r.RTMax, r.RTPref, r.RTMult = MaxIO, MaxIO, 4096
		r.WTMax, r.WTPref, r.WTMult = MaxIO, MaxIO, 4096
		r.DTPref = PrefReaddir
		r.MaxFileSize = 1<<63 - 1
		r.TimeDelta = nfs3.Time{Nseconds: 1}
		r.Properties = nfs3.FSFLink | nfs3.FSFSymlink | nfs3.FSFHomogeneous | nfs3.FSFCanSetTime
		o.close()
	}
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}

// pathconf is PATHCONF (RFC 1813 section 3.3.20), name_max from statfs(2).
func (c *call) pathconf(d *xdr.Decoder, b *sunrpc.Builder) error {
	var a nfs3.PathconfArgs
	if err := a.Decode(d); err != nil {
		return garbage(err)
	}
	var r nfs3.PathconfRes
	o, st := c.open(&a.Object)
	if st == nfs3.OK {
		r.Attr = o.attr()
		var sf unix.Statfs_t
		if err := unix.Fstatfs(o.fd, &sf); err != nil {
			st = statusOf(err)
		} else {
			r.LinkMax = 65000
			r.NameMax = uint32(sf.Namelen)
			r.NoTrunc, r.ChownRestricted, r.CasePreserving = true, true, true
		}
		o.close()
	}
	r.Status = st
	r.Encode(&b.Encoder)
	return nil
}
