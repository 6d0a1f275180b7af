package fusefs

import (
	"context"
	"errors"
	"io"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Read answers READ with client.ReadPlaced (rsize READs, pipelined), after
// the inode's writes in flight (through any of its open files) have
// reached the server. Data the transport received into its own buffers
// (RPC-over-RDMA send-based DDP) goes to the kernel from there
// (placedRead): they are given back once the reply is written to
// /dev/fuse. The READ counts as in progress for an unlink that waits for
// the file's RELEASE (sharedFile.awaitRelease).
func (f *openFile) Read(ctx context.Context, dest []byte, off int64) (_ fuse.ReadResult, errno syscall.Errno) {
	n := f.n
	ctx, op := n.call(ctx, &errno) // the caller's credential, not interrupted; a stale handle (node.call)
	defer op.done()
	f.sh.readStart()
	defer f.sh.readDone()
	_ = f.sh.wb.wait() // a write error is for flush and fsync to report
	vec, k, release, err := n.sys.c.ReadPlaced(ctx, n.fh, dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, toErrno(err)
	}
	if vec != nil {
		return &placedRead{vec: vec, size: k, release: release}, 0
	}
	return fuse.ReadResultData(dest[:k]), 0
}

// placedRead is a fuse.ReadResult whose data is in the RPC transport's
// receive buffers (client.ReadPlaced): go-fuse writes the pieces with
// writev(2) (Slices) and then calls Done, which gives the buffers back.
type placedRead struct {
	vec     [][]byte
	size    int
	release func()
}

func (r *placedRead) Size() int { return r.size }

// Slices makes go-fuse write the pieces as they are (its vectored
// write), without joining them.
func (r *placedRead) Slices() ([][]byte, fuse.Status) { return r.vec, fuse.OK }

// Bytes joins the pieces into buf, for a write that is not vectored.
func (r *placedRead) Bytes(buf []byte) ([]byte, fuse.Status) {
	buf = buf[:0]
	for _, v := range r.vec {
		buf = append(buf, v...)
	}
	return buf, fuse.OK
}

func (r *placedRead) Done() {
	if r.release != nil {
		r.release()
		r.release, r.vec = nil, nil
	}
}
