package client

import (
	"context"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/wakeups"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// wakeupCalls is the calls of BenchmarkWakeups's traced pass.
const wakeupCalls = 2000

// BenchmarkWakeups counts what one NFS call costs the scheduler, client
// and export server in this process, one call at a time, over TCP and
// RPC-over-RDMA (software iWARP) to our server: NULL and GETATTR. The
// timed loop reports the context switches per call (wakeups.Meter: this
// process's, the kernel threads', the machine's); then a pass of 2,000
// calls under the Go execution tracer reports the goroutine wake-ups and
// hand-offs per call (wakeups.Trace; -test.v or -wakeups.sites logs them
// by site).
func BenchmarkWakeups(b *testing.B) {
	ts := []target{targets[1], targets[2]} // ours-tcp, ours-rdma
	calls := []struct {
		name string
		call func(ctx context.Context, c *Client, fh nfs3.FH) error
	}{
		{"null", func(ctx context.Context, c *Client, _ nfs3.FH) error { return c.Null(ctx) }},
		{"getattr", func(ctx context.Context, c *Client, fh nfs3.FH) error { _, err := c.Getattr(ctx, fh); return err }},
	}
	forTargetsIn(b, ts, func(b *testing.B, t target) {
		c, dir := t.mount(b)
		ctx := context.Background()
		for _, k := range calls {
			b.Run(k.name, func(b *testing.B) {
				var m wakeups.Meter
				m.Start(b)
				for b.Loop() {
					if err := k.call(ctx, c, dir); err != nil {
						b.Fatal(err)
					}
				}
				m.Stop(b)
				m.Report(b, float64(b.N), "op")
				wakeups.TracePass(b, wakeupCalls, "op", func() {
					for range wakeupCalls {
						if err := k.call(ctx, c, dir); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	})
}
