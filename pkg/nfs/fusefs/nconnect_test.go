package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// connCalls counts all the calls of one NFS connection of a mount.
type connCalls struct {
	sunrpc.ClientTransport
	calls atomic.Int64
}

func (c *connCalls) RoundTrip(ctx context.Context, call *sunrpc.Call) (*sunrpc.Reply, error) {
	c.calls.Add(1)
	return c.ClientTransport.RoundTrip(ctx, call)
}

// A FUSE mount with nconnect=4, over TCP and over RPC-over-RDMA
// (software iWARP): files written by 8 writers through the kernel, one of
// the four connections closed mid-run, read back equal through the mount
// and in the exported directory; the calls went over four connections (and
// over RDMA the server held four connections of the mount).
func TestNConnectMount(t *testing.T) {
	needFUSE(t)
	for _, proto := range []string{"tcp", "rdma"} {
		t.Run(proto, func(t *testing.T) {
			s := startServer(t)
			var mu sync.Mutex
			var conns []*connCalls
			wrap := wrapConns(func(ct sunrpc.ClientTransport) sunrpc.ClientTransport {
				c := &connCalls{ClientTransport: ct}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				return c
			})
			dir, _ := s.mountWith(t, proto, "nconnect=4", wrap)
			const writers, files, size = 8, 6, 1 << 20
			var done atomic.Int64
			var atKill []int64 // calls per connection when one was closed
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range files {
						name := fmt.Sprintf("w%d-%d", w, i)
						data := make([]byte, size)
						r := rand.NewChaCha8([32]byte{byte(w), byte(i)})
						r.Read(data)
						if err := writeSync(filepath.Join(dir, name), data); err != nil {
							errs <- fmt.Errorf("%s: %w", name, err)
							return
						}
						if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, data) {
							errs <- fmt.Errorf("%s through the mount: equal %v, %v", name, bytes.Equal(got, data), err)
							return
						}
						if got, err := os.ReadFile(filepath.Join(s.root, name)); err != nil || !bytes.Equal(got, data) {
							errs <- fmt.Errorf("%s in the export: equal %v, %v", name, bytes.Equal(got, data), err)
							return
						}
						if done.Add(1) == writers {
							mu.Lock()
							victim := conns[len(conns)/2]
							for _, c := range conns {
								atKill = append(atKill, c.calls.Load())
							}
							mu.Unlock()
							victim.Close() // one connection lost mid-run
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			// New calls skip the closed connection until it is probed
			// (every 500 ms): wait past that, make calls, and it is back.
			time.Sleep(700 * time.Millisecond)
			for i := range 16 {
				if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("w0-%d", i%files))); err != nil {
					t.Fatal(err)
				}
				// a call the kernel cannot answer from its cache
				if err := os.Chmod(filepath.Join(dir, "w0-0"), 0o600+fs.FileMode(i%2)*0o40); err != nil {
					t.Fatal(err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(conns) < 5 {
				t.Errorf("%d NFS connections dialed, want 4 and a reconnect", len(conns))
			}
			if len(atKill) != 4 {
				t.Fatalf("%d connections when one was closed, want 4", len(atKill))
			}
			var total int64
			for _, n := range atKill {
				total += n
			}
			for i, n := range atKill {
				if n*8 < total {
					t.Errorf("connection %d carried %d of %d calls: not spread (%v)", i, n, total, atKill)
				}
			}
			if proto == "rdma" {
				n := 0
				for _, ci := range s.rdma.Connections() {
					if ci.Machine == "fusefs-test" {
						n++
					}
				}
				if n != 4 {
					t.Errorf("the server holds %d RDMA connections of the mount, want 4", n)
				}
			}
		})
	}
}
