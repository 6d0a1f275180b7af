package client

import (
	"context"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// Convenience wrappers over the procedures, in the terms a file system
// layer (FUSE) uses. Modes are permission bits (nfs3.ModePermMask).

// CreateFile creates regular file name in dir with permission bits mode:
// GUARDED when exclusive (NFS3ERR_EXIST if it exists; RFC 1813 section
// 3.3.8), UNCHECKED otherwise (an existing file is kept, not truncated).
// When the server returns no handle or attributes it LOOKUPs the name.
func (c *Client) CreateFile(ctx context.Context, dir nfs3.FH, name string, mode uint32, exclusive bool) (nfs3.FH, nfs3.Fattr, error) {
	how := nfs3.CreateHow{Mode: nfs3.Unchecked, Attr: nfs3.Sattr{SetMode: true, Mode: mode & nfs3.ModePermMask}}
	if exclusive {
		how.Mode = nfs3.Guarded
	}
	res, err := c.Create(ctx, dir, name, how)
	if err != nil {
		return nfs3.FH{}, nfs3.Fattr{}, err
	}
	return c.objOrLookup(ctx, dir, name, res)
}

// MakeDir creates directory name in dir with permission bits mode (MKDIR,
// RFC 1813 section 3.3.9) and returns its handle and attributes.
func (c *Client) MakeDir(ctx context.Context, dir nfs3.FH, name string, mode uint32) (nfs3.FH, nfs3.Fattr, error) {
	res, err := c.Mkdir(ctx, dir, name, nfs3.Sattr{SetMode: true, Mode: mode & nfs3.ModePermMask})
	if err != nil {
		return nfs3.FH{}, nfs3.Fattr{}, err
	}
	return c.objOrLookup(ctx, dir, name, res)
}

// MakeSymlink creates symbolic link name in dir pointing to target
// (SYMLINK, RFC 1813 section 3.3.10) and returns its handle and attributes.
func (c *Client) MakeSymlink(ctx context.Context, dir nfs3.FH, name, target string) (nfs3.FH, nfs3.Fattr, error) {
	res, err := c.Symlink(ctx, dir, name, target, nfs3.Sattr{})
	if err != nil {
		return nfs3.FH{}, nfs3.Fattr{}, err
	}
	return c.objOrLookup(ctx, dir, name, res)
}

func (c *Client) objOrLookup(ctx context.Context, dir nfs3.FH, name string, res nfs3.CreateRes) (nfs3.FH, nfs3.Fattr, error) {
	if res.Obj.Set && res.ObjAttr.Set {
		return res.Obj.FH, res.ObjAttr.Attr, nil
	}
	if res.Obj.Set {
		a, err := c.Getattr(ctx, res.Obj.FH)
		return res.Obj.FH, a, err
	}
	l, err := c.Lookup(ctx, dir, name)
	if err != nil {
		return nfs3.FH{}, nfs3.Fattr{}, err
	}
	if !l.ObjAttr.Set {
		a, err := c.Getattr(ctx, l.Object)
		return l.Object, a, err
	}
	return l.Object, l.ObjAttr.Attr, nil
}

// Chmod sets the permission bits of fh (SETATTR, RFC 1813 section 3.3.2)
// and returns the new attributes (GETATTR if the reply had none).
func (c *Client) Chmod(ctx context.Context, fh nfs3.FH, mode uint32) (nfs3.Fattr, error) {
	return c.setattr(ctx, fh, nfs3.Sattr{SetMode: true, Mode: mode & nfs3.ModePermMask})
}

// Truncate sets the size of regular file fh to size bytes (SETATTR).
func (c *Client) Truncate(ctx context.Context, fh nfs3.FH, size uint64) (nfs3.Fattr, error) {
	return c.setattr(ctx, fh, nfs3.Sattr{SetSize: true, Size: size})
}

// SetTimes sets the access and modification times of fh (SETATTR with
// SET_TO_CLIENT_TIME; a zero time.Time leaves that time unchanged).
func (c *Client) SetTimes(ctx context.Context, fh nfs3.FH, atime, mtime time.Time) (nfs3.Fattr, error) {
	var s nfs3.Sattr
	if !atime.IsZero() {
		s.Atime = nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.TimeOf(atime)}
	}
	if !mtime.IsZero() {
		s.Mtime = nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.TimeOf(mtime)}
	}
	return c.setattr(ctx, fh, s)
}

func (c *Client) setattr(ctx context.Context, fh nfs3.FH, s nfs3.Sattr) (nfs3.Fattr, error) {
	res, err := c.Setattr(ctx, fh, s, nfs3.SattrGuard{})
	if err != nil {
		return nfs3.Fattr{}, err
	}
	if res.Wcc.After.Set {
		return res.Wcc.After.Attr, nil
	}
	return c.Getattr(ctx, fh)
}

// CheckAccess returns the subset of mask (nfs3.AccessRead | ...) the
// server grants the caller's credential on fh (ACCESS, RFC 1813 section
// 3.3.4).
func (c *Client) CheckAccess(ctx context.Context, fh nfs3.FH, mask uint32) (uint32, error) {
	res, err := c.Access(ctx, fh, mask)
	return res.Access, err
}
