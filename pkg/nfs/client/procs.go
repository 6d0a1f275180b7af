package client

import (
	"context"
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// One method per NFSv3 procedure (RFC 1813 section 3.3). Each returns the
// decoded result, also when err wraps the server's nfs3.Status (then the
// resfail arm: post-op attributes and wcc data the server sent). err is
// nil exactly when the status is NFS3_OK.

// checkName refuses a name longer than nfs3.MaxNameLen (255 bytes) with
// an error wrapping nfs3.ErrNameTooLong (ENAMETOOLONG), without a call,
// as the Linux client does (nfs_lookup and friends check the server's
// namelen): Linux knfsd does not answer such a name NFS3ERR_NAMETOOLONG
// but GARBAGE_ARGS, an RPC error that would reach the application as EIO.
// The result's status is set to nfs3.ErrNameTooLong then.
func checkName(proc uint32, st *nfs3.Status, names ...string) error {
	for _, name := range names {
		if len(name) > nfs3.MaxNameLen {
			*st = nfs3.ErrNameTooLong
			return fmt.Errorf("nfs3 %s: a name of %d bytes: %w", nfs3.ProcName(proc), len(name), nfs3.ErrNameTooLong)
		}
	}
	return nil
}

// Null calls NULL (RFC 1813 section 3.3.0) once, without retransmission:
// a liveness probe.
func (c *Client) Null(ctx context.Context) error {
	return c.nfs.pick().Null(ctx, nfs3.Program, nfs3.Version)
}

// Getattr calls GETATTR (RFC 1813 section 3.3.1) and returns the attributes.
func (c *Client) Getattr(ctx context.Context, fh nfs3.FH) (nfs3.Fattr, error) {
	var res nfs3.GetattrRes
	err := c.simple(ctx, nfs3.ProcGetattr, &nfs3.GetattrArgs{Object: fh}, &res, func() nfs3.Status { return res.Status })
	return res.Attr, err
}

// Setattr calls SETATTR (RFC 1813 section 3.3.2). With guard.Check the
// server refuses with NFS3ERR_NOT_SYNC unless the object's ctime is
// guard.Ctime.
func (c *Client) Setattr(ctx context.Context, fh nfs3.FH, attr nfs3.Sattr, guard nfs3.SattrGuard) (nfs3.SetattrRes, error) {
	var res nfs3.SetattrRes
	err := c.simple(ctx, nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: fh, Attr: attr, Guard: guard}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Lookup calls LOOKUP (RFC 1813 section 3.3.3) for name (one component,
// at most 255 bytes) in dir.
func (c *Client) Lookup(ctx context.Context, dir nfs3.FH, name string) (nfs3.LookupRes, error) {
	var res nfs3.LookupRes
	if err := checkName(nfs3.ProcLookup, &res.Status, name); err != nil {
		return res, err
	}
	err := c.simple(ctx, nfs3.ProcLookup, &nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: dir, Name: name}}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Access calls ACCESS (RFC 1813 section 3.3.4) for the bits in mask
// (nfs3.AccessRead | ...); res.Access holds the granted subset.
func (c *Client) Access(ctx context.Context, fh nfs3.FH, mask uint32) (nfs3.AccessRes, error) {
	var res nfs3.AccessRes
	err := c.simple(ctx, nfs3.ProcAccess, &nfs3.AccessArgs{Object: fh, Access: mask}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Readlink calls READLINK (RFC 1813 section 3.3.5) and returns the link's
// target (at most nfs3.MaxPathLen bytes) and attributes. The transport
// may place the path in a buffer of MaxPathLen bytes (RFC 8267 section 4).
func (c *Client) Readlink(ctx context.Context, fh nfs3.FH) (string, nfs3.PostOpAttr, error) {
	var res nfs3.ReadlinkRes
	var target string
	buf := make([]byte, nfs3.MaxPathLen)
	args := nfs3.ReadlinkArgs{Symlink: fh}
	err := c.call(ctx, nfs3.ProcReadlink, nfs3.MaxResultSize(nfs3.ProcReadlink, nil), buf,
		func(b *sunrpc.Builder) { args.Encode(&b.Encoder) },
		func(d *xdr.Decoder, placed int) (nfs3.Status, error) {
			pl := placed >= 0
			err := res.Decode(d, buf[:min(max(placed, 0), len(buf))], pl)
			target = string(res.Path) // copies: Path aliases d or buf
			return res.Status, err
		})
	return target, res.Attr, err
}

// Read calls READ (RFC 1813 section 3.3.6) for up to len(p) bytes at
// offset off (len(p) should not exceed RSize) and returns the number of
// bytes now in p[:n], the eof flag and the file's attributes. The
// transport places the data straight into p (an RDMA Write chunk, or read
// from the TCP stream into p), else it is copied once from the reply. A
// short count without eof is legal.
func (c *Client) Read(ctx context.Context, fh nfs3.FH, off uint64, p []byte) (n int, eof bool, attr nfs3.PostOpAttr, err error) {
	return c.read(ctx, fh, off, p, nil)
}

// read is Read; with take, a result the transport left in its receive
// buffers is handed to take (its pieces and the release of the reply)
// instead of being copied into p, which then only sizes the READ.
func (c *Client) read(ctx context.Context, fh nfs3.FH, off uint64, p []byte, take func(vec [][]byte, release func())) (n int, eof bool, attr nfs3.PostOpAttr, err error) {
	args := nfs3.ReadArgs{File: fh, Offset: off, Count: uint32(len(p))}
	var res nfs3.ReadRes
	err = c.callTake(ctx, nfs3.ProcRead, args.MaxResultSize(), p, take,
		func(b *sunrpc.Builder) { args.Encode(&b.Encoder) },
		func(d *xdr.Decoder, placed int) (nfs3.Status, error) {
			pl := placed >= 0
			if err := res.DecodeMax(d, p[:min(max(placed, 0), len(p))], pl, len(p)); err != nil {
				return res.Status, err
			}
			if res.Status == nfs3.OK {
				n = len(res.Data)
				if !pl {
					copy(p, res.Data)
				}
				eof = res.EOF
			}
			return res.Status, nil
		})
	return n, eof, res.Attr, err
}

// Write calls WRITE (RFC 1813 section 3.3.7) with data at offset off
// (len(data) should not exceed WSize). data is the call's DDP-eligible
// payload: not copied, and it must not change until Write returns.
// res.Count is the number of bytes written (possibly fewer), res.Committed
// how stable they are, res.Verf the write verifier to compare with COMMIT.
func (c *Client) Write(ctx context.Context, fh nfs3.FH, off uint64, data []byte, stable nfs3.StableHow) (nfs3.WriteRes, error) {
	args := nfs3.WriteArgs{File: fh, Offset: off, Stable: stable, Data: data}
	var res nfs3.WriteRes
	err := c.call(ctx, nfs3.ProcWrite, nfs3.MaxResultSize(nfs3.ProcWrite, nil), nil,
		func(b *sunrpc.Builder) { encodeDDPArgs(b, &args) },
		func(d *xdr.Decoder, _ int) (nfs3.Status, error) { return res.Status, res.Decode(d) })
	return res, err
}

// Create calls CREATE (RFC 1813 section 3.3.8) for name in dir, with how
// (UNCHECKED or GUARDED with initial attributes, or EXCLUSIVE with a
// verifier). res.Obj may be unset: then LOOKUP the name (see CreateFile).
func (c *Client) Create(ctx context.Context, dir nfs3.FH, name string, how nfs3.CreateHow) (nfs3.CreateRes, error) {
	var res nfs3.CreateRes
	if err := checkName(nfs3.ProcCreate, &res.Status, name); err != nil {
		return res, err
	}
	err := c.simple(ctx, nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name}, How: how}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Mkdir calls MKDIR (RFC 1813 section 3.3.9).
func (c *Client) Mkdir(ctx context.Context, dir nfs3.FH, name string, attr nfs3.Sattr) (nfs3.MkdirRes, error) {
	var res nfs3.MkdirRes
	if err := checkName(nfs3.ProcMkdir, &res.Status, name); err != nil {
		return res, err
	}
	err := c.simple(ctx, nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name}, Attr: attr}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Symlink calls SYMLINK (RFC 1813 section 3.3.10): name in dir pointing to
// target (at most nfs3.MaxPathLen bytes), sent as the DDP-eligible payload.
func (c *Client) Symlink(ctx context.Context, dir nfs3.FH, name, target string, attr nfs3.Sattr) (nfs3.SymlinkRes, error) {
	args := nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name}, Attr: attr, Path: []byte(target)}
	var res nfs3.SymlinkRes
	if err := checkName(nfs3.ProcSymlink, &res.Status, name); err != nil {
		return res, err
	}
	err := c.call(ctx, nfs3.ProcSymlink, nfs3.MaxResultSize(nfs3.ProcSymlink, nil), nil,
		func(b *sunrpc.Builder) { encodeDDPArgs(b, &args) },
		func(d *xdr.Decoder, _ int) (nfs3.Status, error) { return res.Status, res.Decode(d) })
	return res, err
}

// Mknod calls MKNOD (RFC 1813 section 3.3.11) for a device, socket or FIFO.
func (c *Client) Mknod(ctx context.Context, dir nfs3.FH, name string, typ nfs3.FileType, attr nfs3.Sattr, spec nfs3.SpecData) (nfs3.MknodRes, error) {
	var res nfs3.MknodRes
	if err := checkName(nfs3.ProcMknod, &res.Status, name); err != nil {
		return res, err
	}
	err := c.simple(ctx, nfs3.ProcMknod, &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name}, Type: typ, Attr: attr, Spec: spec}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Remove calls REMOVE (RFC 1813 section 3.3.12) for a non-directory.
func (c *Client) Remove(ctx context.Context, dir nfs3.FH, name string) (nfs3.RemoveRes, error) {
	var res nfs3.RemoveRes
	if err := checkName(nfs3.ProcRemove, &res.Status, name); err != nil {
		return res, err
	}
	err := c.simple(ctx, nfs3.ProcRemove, &nfs3.RemoveArgs{Object: nfs3.DirOpArgs{Dir: dir, Name: name}}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Rmdir calls RMDIR (RFC 1813 section 3.3.13) for an empty directory
// (NFS3ERR_NOTEMPTY otherwise).
func (c *Client) Rmdir(ctx context.Context, dir nfs3.FH, name string) (nfs3.RmdirRes, error) {
	var res nfs3.RmdirRes
	if err := checkName(nfs3.ProcRmdir, &res.Status, name); err != nil {
		return res, err
	}
	err := c.simple(ctx, nfs3.ProcRmdir, &nfs3.RmdirArgs{Object: nfs3.DirOpArgs{Dir: dir, Name: name}}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Rename calls RENAME (RFC 1813 section 3.3.14).
func (c *Client) Rename(ctx context.Context, fromDir nfs3.FH, fromName string, toDir nfs3.FH, toName string) (nfs3.RenameRes, error) {
	var res nfs3.RenameRes
	if err := checkName(nfs3.ProcRename, &res.Status, fromName, toName); err != nil {
		return res, err
	}
	err := c.simple(ctx, nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: fromDir, Name: fromName}, To: nfs3.DirOpArgs{Dir: toDir, Name: toName}}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Link calls LINK (RFC 1813 section 3.3.15): a new name for file in dir.
func (c *Client) Link(ctx context.Context, file, dir nfs3.FH, name string) (nfs3.LinkRes, error) {
	var res nfs3.LinkRes
	if err := checkName(nfs3.ProcLink, &res.Status, name); err != nil {
		return res, err
	}
	err := c.simple(ctx, nfs3.ProcLink, &nfs3.LinkArgs{File: file, Link: nfs3.DirOpArgs{Dir: dir, Name: name}}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Readdir calls READDIR (RFC 1813 section 3.3.16) once: entries after
// cookie (0 to start, with a zero verf), within count bytes of reply.
func (c *Client) Readdir(ctx context.Context, dir nfs3.FH, cookie uint64, verf nfs3.CookieVerf, count uint32) (nfs3.ReaddirRes, error) {
	var res nfs3.ReaddirRes
	err := c.simple(ctx, nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: dir, Cookie: cookie, Verf: verf, Count: count}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// ReaddirplusOnce calls READDIRPLUS (RFC 1813 section 3.3.17) once:
// entries after cookie with attributes and handles, dircount bytes of
// directory information (a hint), maxcount bytes of reply. Readdirplus
// iterates a whole directory.
func (c *Client) ReaddirplusOnce(ctx context.Context, dir nfs3.FH, cookie uint64, verf nfs3.CookieVerf, dircount, maxcount uint32) (nfs3.ReaddirplusRes, error) {
	var res nfs3.ReaddirplusRes
	err := c.simple(ctx, nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: dir, Cookie: cookie, Verf: verf, DirCount: dircount, MaxCount: maxcount}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Fsstat calls FSSTAT (RFC 1813 section 3.3.18): space and file counts.
func (c *Client) Fsstat(ctx context.Context, fh nfs3.FH) (nfs3.FsstatRes, error) {
	var res nfs3.FsstatRes
	err := c.simple(ctx, nfs3.ProcFsstat, &nfs3.FsstatArgs{FSRoot: fh}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Fsinfo calls FSINFO (RFC 1813 section 3.3.19): transfer sizes and
// properties.
func (c *Client) Fsinfo(ctx context.Context, fh nfs3.FH) (nfs3.FsinfoRes, error) {
	var res nfs3.FsinfoRes
	err := c.simple(ctx, nfs3.ProcFsinfo, &nfs3.FsinfoArgs{FSRoot: fh}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Pathconf calls PATHCONF (RFC 1813 section 3.3.20).
func (c *Client) Pathconf(ctx context.Context, fh nfs3.FH) (nfs3.PathconfRes, error) {
	var res nfs3.PathconfRes
	err := c.simple(ctx, nfs3.ProcPathconf, &nfs3.PathconfArgs{Object: fh}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// Commit calls COMMIT (RFC 1813 section 3.3.21) for count bytes at off
// (count 0: to the end of the file). res.Verf must equal the verifier of
// the WRITE replies being committed, else the server lost them (File.Commit
// handles this).
func (c *Client) Commit(ctx context.Context, fh nfs3.FH, off uint64, count uint32) (nfs3.CommitRes, error) {
	var res nfs3.CommitRes
	err := c.simple(ctx, nfs3.ProcCommit, &nfs3.CommitArgs{File: fh, Offset: off, Count: count}, &res, func() nfs3.Status { return res.Status })
	return res, err
}

// encodeDDPArgs encodes m with its DDP-eligible item (WRITE data, SYMLINK
// path) marked as the message's payload: not copied, sent as a Read chunk
// over RDMA or after the head over TCP.
func encodeDDPArgs(b *sunrpc.Builder, m nfs3.DDPMessage) {
	b.MarkPayload(m.Encode(&b.Encoder))
}
