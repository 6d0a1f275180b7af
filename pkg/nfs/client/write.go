package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// File writes one regular file with UNSTABLE WRITEs and COMMIT (RFC 1813
// sections 3.3.7 and 3.3.21), the way Linux's page cache does, and keeps
// the data of every write the server has not yet committed so that it can
// be re-sent when the server's write verifier changes (the server rebooted
// and lost its unstable data).
//
// Memory bound: the uncommitted data is a copy of what WriteAt was given,
// at most Options.MaxUncommitted bytes (default 64 MiB) per File: a
// WriteAt handles p in segments of at most that size and, before sending a
// segment that would pass the bound, commits what is pending (one COMMIT,
// synchronously). Concurrent WriteAt calls check the bound independently,
// so with k of them in flight the peak is at most (k+1) x MaxUncommitted. The copy is also what WRITE sends: it is the
// call's DDP-eligible payload, so each written byte is copied exactly once.
//
// A File is safe for concurrent use. Writes that overlap in flight are not
// ordered against each other (as for pwrite on two threads).
type File struct {
	c  *Client
	fh nfs3.FH

	// commitSem (capacity 1) serialises Commit: a Commit that would find
	// the pending writes taken by another one in progress waits for it, so
	// that no Commit returns before every write acknowledged before it
	// started is committed (or kept after an error).
	commitSem chan struct{}

	mu      sync.Mutex
	pending []piece // UNSTABLE writes the server acknowledged, not yet committed
	bytes   int     // sum of len(pending[i].data)
	resent  uint64  // bytes re-sent after a verifier change, for tests and metrics
}

// piece is the data of one WRITE reply with committed == UNSTABLE.
type piece struct {
	off  uint64
	data []byte
	verf nfs3.WriteVerf
}

// OpenFile returns a File for the regular file fh. No call is made.
func (c *Client) OpenFile(fh nfs3.FH) *File {
	return &File{c: c, fh: fh, commitSem: make(chan struct{}, 1)}
}

// FH returns the file's handle.
func (f *File) FH() nfs3.FH { return f.fh }

// Uncommitted returns the bytes of data kept for a later COMMIT.
func (f *File) Uncommitted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bytes
}

// Resent returns the bytes re-sent so far because the write verifier changed.
func (f *File) Resent() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resent
}

// ReadAt reads like Client.ReadAt. It does not see data that is only in
// flight in a concurrent WriteAt.
func (f *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return f.c.ReadAt(ctx, f.fh, p, off)
}

// WriteAt writes p at byte offset off, like io.WriterAt: UNSTABLE WRITEs
// of at most WSize bytes, at most Options.Window in flight. p is copied
// (once) and may be reused when WriteAt returns; the data is durable only
// after Commit. A short WRITE is continued for the rest of its part; a
// WRITE that makes no progress fails with ErrShortWrite.
//
// It returns len(p), or fewer with the first error (an nfs3.Status such as
// ErrNoSpc or ErrStale, an RPC error, ctx's error): then p[:n] was written.
func (f *File) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("nfs client: WriteAt: negative offset %d", off)
	}
	max := f.c.opts.MaxUncommitted
	done := 0
	for done < len(p) {
		seg := min(len(p)-done, max)
		f.mu.Lock()
		full := f.bytes+seg > max
		f.mu.Unlock()
		if full {
			if err := f.Commit(ctx); err != nil {
				return done, err
			}
		}
		buf := make([]byte, seg)
		copy(buf, p[done:done+seg])
		n, err := f.writeSeg(ctx, uint64(off)+uint64(done), buf)
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// writeSeg sends buf (owned by f from now on) at off in wsize chunks.
func (f *File) writeSeg(ctx context.Context, off uint64, buf []byte) (int, error) {
	ws := f.c.wsize
	nchunks := (len(buf) + ws - 1) / ws
	type result struct {
		n   int
		err error
	}
	res := make([]result, nchunks)
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, f.c.opts.Window)
	var wg sync.WaitGroup
	for i := range nchunks {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			res[i].err = ctx.Err()
			continue
		}
		lo := i * ws
		hi := min(lo+ws, len(buf))
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			n, err := f.writeChunk(ctx, off+uint64(lo), buf[lo:hi], nfs3.Unstable)
			res[i] = result{n, err}
			if err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	total := 0
	for i := range res {
		total += res[i].n
		if err := res[i].err; err != nil {
			if parent.Err() == nil && isCanceled(err) {
				if cause := context.Cause(ctx); cause != nil {
					err = cause
				}
			}
			return total, err
		}
	}
	return total, nil
}

// writeChunk WRITEs data at off until all of it is acknowledged, recording
// every UNSTABLE reply's part in f.pending.
func (f *File) writeChunk(ctx context.Context, off uint64, data []byte, stable nfs3.StableHow) (int, error) {
	done := 0
	for done < len(data) {
		res, err := f.c.Write(ctx, f.fh, off+uint64(done), data[done:], stable)
		if err != nil {
			return done, err
		}
		n := int(min(res.Count, uint32(len(data)-done)))
		if n == 0 {
			return done, fmt.Errorf("nfs client: WRITE at %d: %w", off+uint64(done), ErrShortWrite)
		}
		if res.Committed == nfs3.Unstable {
			f.mu.Lock()
			f.pending = append(f.pending, piece{off: off + uint64(done), data: data[done : done+n], verf: res.Verf})
			f.bytes += n
			f.mu.Unlock()
		}
		done += n
	}
	return done, nil
}

// Commit makes every acknowledged UNSTABLE write of f durable: one COMMIT
// of the whole file (offset 0, count 0; RFC 1813 section 3.3.21), then
// each write whose reply carried a verifier other than the COMMIT's is
// re-sent with FILE_SYNC (the server lost it; RFC 1813 section 3.3.7 on
// writeverf3), at most Window at once. The kept data is released when
// Commit succeeds; on error it stays kept for the next Commit. Writes
// acknowledged while Commit runs wait for the next one. Commits of one
// File run one at a time: a Commit called while another is in progress
// waits for it (bounded by ctx), so that when Commit returns nil every
// write acknowledged before it was called is durable on the server.
//
// Errors: an nfs3.Status (ErrIO, ErrStale, ...), RPC or ctx errors.
func (f *File) Commit(ctx context.Context) error {
	select {
	case f.commitSem <- struct{}{}:
	default: // another Commit is in progress
		select {
		case f.commitSem <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("nfs client: COMMIT: waiting for the COMMIT in progress: %w", ctx.Err())
		}
	}
	defer func() { <-f.commitSem }()
	f.mu.Lock()
	ps := f.pending
	f.pending = nil
	f.mu.Unlock()
	if len(ps) == 0 {
		return nil
	}
	res, err := f.c.Commit(ctx, f.fh, 0, 0)
	if err != nil {
		f.putBack(ps)
		return err
	}
	var lost []piece
	kept, lostBytes := 0, 0
	for _, p := range ps {
		kept += len(p.data)
		if p.verf != res.Verf {
			lost = append(lost, p)
			lostBytes += len(p.data)
		}
	}
	if len(lost) > 0 {
		f.c.verfChanges.Add(1)
		if err := f.resend(ctx, lost, res.Verf); err != nil {
			// What was committed with the right verifier is durable; keep
			// only the lost pieces (resend failed for some of them).
			f.putBack(lost)
			f.mu.Lock()
			f.bytes -= kept - lostBytes
			f.mu.Unlock()
			return err
		}
	}
	f.mu.Lock()
	f.bytes -= kept
	f.mu.Unlock()
	return nil
}

// resend writes the lost pieces again, FILE_SYNC so that no further COMMIT
// (and no further verifier comparison) is needed.
func (f *File) resend(ctx context.Context, lost []piece, verf nfs3.WriteVerf) error {
	var n int
	for _, p := range lost {
		n += len(p.data)
	}
	klog.V(2).InfoS("NFS write verifier changed: re-sending uncommitted writes", "fh", f.fh.String(), "writes", len(lost), "bytes", n, "verf", fmt.Sprintf("%x", verf))
	sem := make(chan struct{}, f.c.opts.Window)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, p := range lost {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for lo := 0; lo < len(p.data); lo += f.c.wsize {
				hi := min(lo+f.c.wsize, len(p.data))
				if _, err := f.syncWrite(ctx, p.off+uint64(lo), p.data[lo:hi]); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	f.mu.Lock()
	f.resent += uint64(n)
	f.mu.Unlock()
	f.c.resentBytes.Add(uint64(n))
	return errors.Join(errs...)
}

// syncWrite is writeChunk with FILE_SYNC; a server that answers UNSTABLE
// anyway gets its piece recorded for the next Commit.
func (f *File) syncWrite(ctx context.Context, off uint64, data []byte) (int, error) {
	return f.writeChunk(ctx, off, data, nfs3.FileSync)
}

func (f *File) putBack(ps []piece) {
	f.mu.Lock()
	f.pending = append(ps, f.pending...)
	f.mu.Unlock()
}

// Close commits the pending writes (see Commit).
func (f *File) Close(ctx context.Context) error { return f.Commit(ctx) }
