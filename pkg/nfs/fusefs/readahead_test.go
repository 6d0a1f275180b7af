package fusefs

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// readWatch is a sunrpc.ClientTransport that records the calls with a
// DDP-eligible result (READ, READLINK): their sizes and how many were in
// flight at once.
type readWatch struct {
	sunrpc.ClientTransport
	mu                 sync.Mutex
	calls, inFlight    int
	maxInFlight, maxSz int
}

func (w *readWatch) RoundTrip(ctx context.Context, c *sunrpc.Call) (*sunrpc.Reply, error) {
	n := len(c.ReplyPayload)
	if n == 0 {
		return w.ClientTransport.RoundTrip(ctx, c)
	}
	w.mu.Lock()
	w.calls++
	w.inFlight++
	w.maxInFlight = max(w.maxInFlight, w.inFlight)
	w.maxSz = max(w.maxSz, n)
	w.mu.Unlock()
	defer func() { w.mu.Lock(); w.inFlight--; w.mu.Unlock() }()
	return w.ClientTransport.RoundTrip(ctx, c)
}

// TestReadAhead: a mount's kernel read-ahead is read_ahead_kb (4 MiB by
// default), so a sequential reader gets 1 MiB READs (rsize) several at a
// time, instead of the kernel's 128 KiB FUSE default one at a time; the
// bytes are the file's.
func TestReadAhead(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	data := make([]byte, 24<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(filepath.Join(s.root, "big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, proto := range []string{mountopts.ProtoRDMA, mountopts.ProtoTCP} {
		t.Run(proto, func(t *testing.T) {
			var watches []*readWatch
			var mu sync.Mutex
			wrap := wrapConns(func(ct sunrpc.ClientTransport) sunrpc.ClientTransport {
				w := &readWatch{ClientTransport: ct}
				mu.Lock()
				watches = append(watches, w)
				mu.Unlock()
				return w
			})
			dir, _ := s.mountWith(t, proto, "", wrap)
			if kb, err := ReadAhead(dir); err != nil || kb != mountopts.DefaultReadAheadKB {
				t.Fatalf("read_ahead_kb %d, %v; want %d", kb, err, mountopts.DefaultReadAheadKB)
			}
			f, err := os.Open(filepath.Join(dir, "big"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got := make([]byte, 0, len(data))
			buf := make([]byte, 1<<20)
			for {
				n, err := f.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes, not the file's %d", len(got), len(data))
			}
			mu.Lock()
			defer mu.Unlock()
			var calls, inFlight, size int
			for _, w := range watches {
				w.mu.Lock()
				calls, inFlight, size = calls+w.calls, max(inFlight, w.maxInFlight), max(size, w.maxSz)
				w.mu.Unlock()
			}
			t.Logf("%d READs, at most %d in flight, largest %d bytes", calls, inFlight, size)
			if size != MaxWrite || inFlight < 2 || calls > len(data)/(128<<10) {
				t.Errorf("%d READs for %d MiB, at most %d in flight, largest %d bytes: want 1 MiB READs, several in flight", calls, len(data)>>20, inFlight, size)
			}
		})
	}
	t.Run("option", func(t *testing.T) {
		dir, _ := s.mount(t, mountopts.ProtoTCP, "read_ahead_kb=1024")
		if kb, err := ReadAhead(dir); err != nil || kb != 1024 {
			t.Fatalf("read_ahead_kb %d, %v; want 1024", kb, err)
		}
	})
}
