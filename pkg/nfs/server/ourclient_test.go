package server

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// TestOurClient mounts our export server with our NFS client, over TCP
// and over RPC-over-RDMA (software iWARP), and moves real data: a 16 MiB
// file written UNSTABLE + COMMIT and read back byte-exact (over RDMA: WRITE
// data in Read chunks, READ data in Write chunks), a directory of 500
// entries listed with READDIRPLUS (Reply chunks; in version 2
// responder-provided Read chunks), a rename and a remove;
// the bytes are checked on the server's disk too.
func TestOurClient(t *testing.T) {
	// rdma: RPC-over-RDMA version 2, negotiated; rdma1: version 1.
	for _, proto := range []string{"tcp", "rdma", "rdma1"} {
		t.Run(proto, func(t *testing.T) { ourClient(t, proto) })
	}
}

func ourClient(t *testing.T, proto string) {
	root := t.TempDir()
	srv, err := New(Options{Root: root, Exports: []Export{{Path: "/"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 60*time.Second)
	var wrap func(sunrpc.DialFunc) sunrpc.DialFunc
	var rdma *rpcrdma.ClientMetrics
	var placed atomic.Int64 // READ data read from TCP straight into the caller's buffer
	if proto == "tcp" {
		wrap = func(dial sunrpc.DialFunc) sunrpc.DialFunc {
			return func(ctx context.Context) (sunrpc.ClientTransport, error) {
				tr, err := dial(ctx)
				return placedCounter{tr, &placed}, err
			}
		}
	}
	vers := 2
	if proto == "rdma1" {
		proto, vers = "rdma", 1
	}
	if proto == "rdma" {
		rdma = new(rpcrdma.ClientMetrics)
	}
	c := serveOurClient(t, srv, proto, vers, rdma, wrap)

	data := make([]byte, 16<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	fh, _, err := c.CreateFile(ctx, c.Root(), "big", 0o644, false)
	if err != nil {
		t.Fatal(err)
	}
	f := c.OpenFile(fh)
	if n, err := f.WriteAt(ctx, data, 0); err != nil || n != len(data) {
		t.Fatalf("WriteAt: %d, %v", n, err)
	}
	if err := f.Commit(ctx); err != nil {
		t.Fatal("commit:", err)
	}
	got := make([]byte, len(data))
	if n, err := f.ReadAt(ctx, got, 0); n != len(data) || (err != nil && err != io.EOF) {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back differs")
	}
	onDisk, err := os.ReadFile(root + "/big")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, data) {
		t.Fatal("bytes on the server's disk differ")
	}

	for i := 0; i < 500; i++ {
		if _, _, err := c.CreateFile(ctx, c.Root(), "f"+strconv.Itoa(i), 0o600, false); err != nil {
			t.Fatal(err)
		}
	}
	names := map[string]bool{}
	for e, err := range c.Readdirplus(ctx, c.Root()) {
		if err != nil {
			t.Fatal(err)
		}
		names[e.Name] = true
	}
	if len(names) != 500+1+2 { // the files, "big", "." and ".."
		t.Fatalf("READDIRPLUS listed %d names", len(names))
	}
	if _, err := c.Rename(ctx, c.Root(), "f0", c.Root(), "renamed"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Remove(ctx, c.Root(), "renamed"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.LookupPath(ctx, c.Root(), "renamed", false); err == nil {
		t.Fatal("removed file still found")
	}
	if proto == "tcp" && placed.Load() < int64(len(data)) {
		t.Fatalf("%d bytes of READ data placed from TCP, want all %d read", placed.Load(), len(data))
	}
	if rdma != nil {
		m := rdma.Metrics()
		t.Logf("RPC-over-RDMA: %+v", m)
		if m.ReadChunks == 0 || m.WriteChunks == 0 || m.ReadChunkBytes < 16<<20 || m.WriteChunkBytes < 16<<20 {
			t.Fatal("the data did not move in Read and Write chunks")
		}
		// READDIRPLUS: version 1 offers a Reply chunk; version 2 none, and
		// the server exposes the long replies in Read chunks.
		if vers == 1 && m.ReplyChunks == 0 || vers == 2 && (m.ReplyReadChunks == 0 || m.ReplyChunks != 0 || m.PullDone != m.ReplyReadChunks) {
			t.Fatal("the READDIRPLUS replies did not come in Reply chunks (version 1) or responder-provided Read chunks (version 2)")
		}
		if m.Version != int64(vers) || m.Version1Fallbacks != 0 {
			t.Fatalf("RPC-over-RDMA version %d (fallbacks %d), want %d", m.Version, m.Version1Fallbacks, vers)
		}
	}
}

// placedCounter counts the bytes of DDP-eligible results its transport
// placed into the callers' buffers (sunrpc.Reply.Placed).
type placedCounter struct {
	sunrpc.ClientTransport
	n *atomic.Int64
}

func (p placedCounter) RoundTrip(ctx context.Context, c *sunrpc.Call) (*sunrpc.Reply, error) {
	r, err := p.ClientTransport.RoundTrip(ctx, c)
	if err == nil && r.Placed > 0 {
		p.n.Add(int64(r.Placed))
	}
	return r, err
}
