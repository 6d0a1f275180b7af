package client

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// maxBadCookieRestarts bounds the restarts of one Readdirplus iteration.
const maxBadCookieRestarts = 3

// Readdirplus iterates over directory dir with READDIRPLUS (RFC 1813
// section 3.3.17): each entry with its cookie, and the attributes and
// handle when the server sent them ("." and ".." included if the server
// lists them; Ganesha and knfsd do). Each call asks for maxcount = the
// server's FSINFO dtpref (32 KiB if unset, at most 1 MiB) and dircount =
// maxcount/8, as Linux does; the cookie of the last entry and the returned
// cookieverf are passed to the next call.
//
// When the server answers NFS3ERR_BAD_COOKIE (the directory changed so
// that the cookie is no longer valid) the iteration restarts from cookie 0
// with a zero verifier and skips the names it already yielded, at most 3
// times. To do that it remembers every yielded name: memory grows with
// the directory (about the size of the names plus 16 bytes each).
//
// The error, if any, is yielded last with a zero entry: an nfs3.Status
// (ErrNotDir, ErrStale, ErrAccess, ErrBadCookie after too many restarts,
// ...), an RPC error or ctx's error. Stopping the loop early is allowed.
func (c *Client) Readdirplus(ctx context.Context, dir nfs3.FH) iter.Seq2[nfs3.EntryPlus, error] {
	return func(yield func(nfs3.EntryPlus, error) bool) {
		maxcount := uint32(c.dsize)
		dircount := maxcount / 8
		var (
			cookie   uint64
			verf     nfs3.CookieVerf
			seen     = make(map[string]struct{})
			dedupe   bool
			restarts int
		)
		for {
			res, err := c.ReaddirplusOnce(ctx, dir, cookie, verf, dircount, maxcount)
			if errors.Is(err, nfs3.ErrBadCookie) && restarts < maxBadCookieRestarts {
				restarts++
				klog.V(2).InfoS("READDIRPLUS: bad cookie, restarting", "dir", dir.String(), "cookie", cookie, "restart", restarts)
				cookie, verf, dedupe = 0, nfs3.CookieVerf{}, true
				continue
			}
			if err != nil {
				yield(nfs3.EntryPlus{}, err)
				return
			}
			for i := range res.Entries {
				e := res.Entries[i]
				cookie = e.Cookie
				if _, ok := seen[e.Name]; ok && dedupe {
					continue
				}
				seen[e.Name] = struct{}{}
				if !yield(e, nil) {
					return
				}
			}
			verf = res.Verf
			if res.EOF {
				return
			}
			if len(res.Entries) == 0 {
				yield(nfs3.EntryPlus{}, fmt.Errorf("nfs3 READDIRPLUS: no entries and no eof at cookie %d: %w", cookie, nfs3.ErrIO))
				return
			}
		}
	}
}
