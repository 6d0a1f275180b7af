package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// ReadAt reads len(p) bytes of file fh at byte offset off into p, like
// io.ReaderAt: it splits the range into READs of at most RSize bytes (RFC
// 1813 section 3.3.6) and keeps at most Options.Window of them in flight,
// each reading straight into its part of p (see Read). A short READ
// without eof is continued with another READ for the rest of its part, as
// Linux does.
//
// It returns the number of bytes read, n < len(p) only with an error:
// io.EOF when the file ends before off+len(p), the first NFS error
// (wrapping an nfs3.Status) or RPC error otherwise, in which case p[:n]
// is still valid. ctx bounds the whole read.
func (c *Client) ReadAt(ctx context.Context, fh nfs3.FH, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("nfs client: ReadAt: negative offset %d", off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	rs := c.rsize
	nchunks := (len(p) + rs - 1) / rs
	if nchunks == 1 {
		n, _, err := c.readFull(ctx, fh, uint64(off), p)
		if err == nil && n < len(p) {
			err = io.EOF
		}
		return n, err
	}
	type result struct {
		n   int
		err error
	}
	res := make([]result, nchunks)
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, c.opts.Window)
	var wg sync.WaitGroup
	// eofAt is the first chunk that met the end of the file: later chunks
	// are not issued. Chunks before it must still complete, so meeting EOF
	// cancels nothing.
	var eofAt atomic.Int64
	eofAt.Store(int64(nchunks))
	for i := range nchunks {
		if int64(i) > eofAt.Load() {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			res[i].err = ctx.Err()
			continue
		}
		lo := i * rs
		hi := min(lo+rs, len(p))
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			n, eof, err := c.readFull(ctx, fh, uint64(off)+uint64(lo), p[lo:hi])
			res[i] = result{n, err}
			if err != nil {
				cancel(err) // the whole read fails
			} else if eof && n < hi-lo {
				for cur := eofAt.Load(); int64(i) < cur && !eofAt.CompareAndSwap(cur, int64(i)); cur = eofAt.Load() {
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for i := range res {
		want := min(rs, len(p)-i*rs)
		total += res[i].n
		if err := res[i].err; err != nil {
			// A READ cut short by another chunk's failure reports that
			// failure, unless the caller's ctx ended.
			if parent.Err() == nil && ctx.Err() != nil && isCanceled(err) {
				return total, context.Cause(ctx)
			}
			return total, err
		}
		if res[i].n < want {
			return total, io.EOF
		}
	}
	return total, nil
}

// readFull fills p from off with READs until it is full or the server
// says eof (or returns no data, taken as eof).
func (c *Client) readFull(ctx context.Context, fh nfs3.FH, off uint64, p []byte) (int, bool, error) {
	got := 0
	for got < len(p) {
		n, eof, _, err := c.Read(ctx, fh, off+uint64(got), p[got:])
		got += n
		if err != nil {
			return got, false, err
		}
		if eof || n == 0 {
			return got, true, nil
		}
	}
	return got, false, nil
}

func isCanceled(err error) bool { return errors.Is(err, context.Canceled) }

// ReadPlaced is ReadAt for a FUSE read: when one READ covers p (at most
// RSize bytes) and the transport received its data into its own buffers
// (RPC-over-RDMA send-based DDP), the data is returned as those buffers'
// pieces, vec, not copied into p, and release must be called once they
// are no longer used (it gives the receive buffers back to the
// transport). Otherwise vec and release are nil and the data is in
// p[:n], as ReadAt leaves it. n and the error are ReadAt's: n < len(p)
// only with an error, io.EOF when the file ends first.
func (c *Client) ReadPlaced(ctx context.Context, fh nfs3.FH, p []byte, off int64) (vec [][]byte, n int, release func(), err error) {
	if off < 0 || len(p) == 0 || len(p) > c.rsize {
		n, err = c.ReadAt(ctx, fh, p, off)
		return nil, n, nil, err
	}
	var kept [][]byte
	n, eof, _, err := c.read(ctx, fh, uint64(off), p, func(v [][]byte, rel func()) { kept, release = v, rel })
	if err != nil {
		return nil, n, nil, err
	}
	switch {
	case n == len(p):
		return kept, n, release, nil
	case eof || n == 0:
		return kept, n, release, io.EOF
	}
	// A short READ without eof: the rest by READs into p, as ReadAt.
	if kept != nil {
		at := 0
		for _, b := range kept {
			at += copy(p[at:], b)
		}
		release()
	}
	m, _, err := c.readFull(ctx, fh, uint64(off)+uint64(n), p[n:])
	n += m
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return nil, n, nil, err
}
