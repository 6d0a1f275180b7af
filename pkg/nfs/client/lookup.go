package client

import (
	"context"
	"fmt"
	"strings"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// MaxSymlinkFollows bounds the symbolic links LookupPath follows (Linux
// MAXSYMLINKS, 40).
const MaxSymlinkFollows = 40

// LookupPath resolves a slash-separated path from dir (or from the
// export's root when path starts with "/") with one LOOKUP per component
// (RFC 1813 section 3.3.3), the way a client must: NFSv3 has no
// multi-component lookup. Empty and "." components are skipped; ".." is
// looked up on the server, except at the export's root where it stays.
//
// Symbolic links in the middle of the path are followed (READLINK) when
// their target is relative; the last component is followed only with
// followLast. An absolute target refers to the client's namespace, not
// the export, and fails with ErrBadPath, as do more than
// MaxSymlinkFollows links. It returns the handle and the attributes
// (from LOOKUP, or GETATTR when the server sent none).
//
// Errors: an nfs3.Status from LOOKUP or READLINK (ErrNoEnt, ErrNotDir,
// ErrAccess, ...), ErrBadPath, RPC or ctx errors.
func (c *Client) LookupPath(ctx context.Context, dir nfs3.FH, path string, followLast bool) (nfs3.FH, nfs3.Fattr, error) {
	if strings.HasPrefix(path, "/") {
		dir = c.root
	}
	comps := splitPath(path)
	cur := dir
	var attr nfs3.Fattr
	looked := false
	links := 0
	for len(comps) > 0 {
		name := comps[0]
		comps = comps[1:]
		if name == ".." && fhEqual(cur, c.root) {
			continue
		}
		res, err := c.Lookup(ctx, cur, name)
		if err != nil {
			return nfs3.FH{}, nfs3.Fattr{}, fmt.Errorf("lookup %q: %w", name, err)
		}
		a := res.ObjAttr.Attr
		if !res.ObjAttr.Set {
			if a, err = c.Getattr(ctx, res.Object); err != nil {
				return nfs3.FH{}, nfs3.Fattr{}, err
			}
		}
		if a.Type == nfs3.TypeLnk && (len(comps) > 0 || followLast) {
			links++
			if links > MaxSymlinkFollows {
				return nfs3.FH{}, nfs3.Fattr{}, fmt.Errorf("%w: %q: more than %d symbolic links", ErrBadPath, path, MaxSymlinkFollows)
			}
			target, _, err := c.Readlink(ctx, res.Object)
			if err != nil {
				return nfs3.FH{}, nfs3.Fattr{}, err
			}
			if strings.HasPrefix(target, "/") {
				return nfs3.FH{}, nfs3.Fattr{}, fmt.Errorf("%w: %q: symbolic link %q has absolute target %q", ErrBadPath, path, name, target)
			}
			comps = append(splitPath(target), comps...)
			continue // stay in cur: the target is relative to the link's directory
		}
		cur, attr, looked = res.Object, a, true
	}
	if !looked { // "", ".", "/" or ".." at the root: the start itself
		a, err := c.Getattr(ctx, cur)
		if err != nil {
			return nfs3.FH{}, nfs3.Fattr{}, err
		}
		attr = a
	}
	return cur, attr, nil
}

func splitPath(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	return out
}

func fhEqual(a, b nfs3.FH) bool { return string(a.Bytes()) == string(b.Bytes()) }
