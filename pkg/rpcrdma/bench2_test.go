package rpcrdma

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Benchmarks of RPC-over-RDMA version 2 beside version 1, in one run.

// BenchmarkVersionNull: NULL calls at 1 and 128 outstanding over each
// version.
func BenchmarkVersionNull(b *testing.B) {
	for _, v := range []int{1, 2} {
		for _, out := range []int{1, 128} {
			ts := startServer(b, ServerOptions{Credits: max(out, 32), MaxVersion: v})
			c, _ := newClient(b, ts, ClientOptions{Credits: max(out, 32), MaxVersion: v, Versions: &VersionCache{}})
			b.Run(fmt.Sprintf("v%d/outstanding=%d", v, out), func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				var next atomic.Int64
				var wg sync.WaitGroup
				for range out {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for next.Add(1) <= int64(b.N) {
							if err := c.Null(ctx, tProg, tVers); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}

// BenchmarkAboveInline: a call just above the 4096-byte inline threshold
// (6000 bytes of arguments that are not DDP-eligible, a small reply), and
// a reply just above it (6000 bytes of results, a small call): version 1
// moves them in a Position-Zero Read chunk or a Reply chunk (an RDMA Read
// or Write, memory registered and invalidated per call); version 2 sends
// them in Continued format (two Sends); "v2-chunks" is version 2 with
// NoContinuation (and, for the reply, a Reply chunk offered), as version 1.
// Responder-provided Read chunks are off (BenchmarkReplyReadChunk).
func BenchmarkAboveInline(b *testing.B) {
	const n = 6000
	arg := pattern(n, 1)
	for _, tc := range []struct {
		name   string
		vers   int
		noCont bool
	}{{"v1-chunk", 1, false}, {"v2-continuation", 2, false}, {"v2-chunk", 2, true}} {
		ts := startServer(b, ServerOptions{Credits: 32, MaxVersion: tc.vers})
		c, cm := newClient(b, ts, ClientOptions{Credits: 32, MaxVersion: tc.vers, NoContinuation: tc.noCont, NoResponderReadChunks: true, Versions: &VersionCache{}})
		callSpec := sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pSink,
			Args:         func(e *sunrpc.Builder) { e.Opaque(arg) },
			MaxReplySize: 256}
		// pSink reads a DDP-eligible argument; as an opaque it is not
		// reduced. Its result: the length.
		callSpec.Results = func(d *xdr.Decoder, placed int) error { d.Uint32(); return d.Err() }
		maxReply := 100 // continuation: no Reply chunk for the reply
		if tc.vers == 1 || tc.noCont {
			maxReply = n + 64
		}
		replySpec := sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pLong,
			Args:         func(e *sunrpc.Builder) { e.Uint32(n) },
			Results:      func(d *xdr.Decoder, placed int) error { d.Opaque(n); return d.Err() },
			MaxReplySize: maxReply}
		for _, k := range []struct {
			name string
			spec sunrpc.CallSpec
		}{{"call", callSpec}, {"reply", replySpec}} {
			b.Run(tc.name+"/"+k.name, func(b *testing.B) {
				benchCalls(b, c, cm, k.spec, n, perOp{"continued/op", func(m *Metrics) uint64 { return m.Continued }})
			})
		}
	}
}

// BenchmarkReplyReadChunk: replies of READDIRPLUS size (non-DDP results
// of 2 KiB, 32 KiB and 256 KiB) to calls that cannot bound them
// (sunrpc.Call.UnboundedReply, MaxReplySize 1 MiB), one at a time:
// "read-chunk" with responder-provided Read chunks (no Reply chunk
// offered; a reply too large for inline is exposed by the responder,
// pulled by RDMA Read and notified with RDMA2_DONE), "reply-chunk"
// without them (a 1 MiB Reply chunk registered and invalidated per call,
// the responder RDMA Writes the reply into it), on version 2 both.
func BenchmarkReplyReadChunk(b *testing.B) {
	for _, mode := range []string{"read-chunk", "reply-chunk"} {
		ts := startServer(b, ServerOptions{Credits: 32})
		c, cm := newClient(b, ts, ClientOptions{Credits: 32, NoResponderReadChunks: mode == "reply-chunk", Versions: &VersionCache{}})
		for _, n := range []int{2 << 10, 32 << 10, 256 << 10} {
			spec := sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pLong,
				Args:         func(e *sunrpc.Builder) { e.Uint32(uint32(n)) },
				Results:      func(d *xdr.Decoder, placed int) error { d.Opaque(n); return d.Err() },
				MaxReplySize: 1 << 20, UnboundedReply: true}
			b.Run(fmt.Sprintf("%s/%dKiB", mode, n>>10), func(b *testing.B) {
				benchCalls(b, c, cm, spec, n,
					perOp{"readchunks/op", func(m *Metrics) uint64 { return m.ReplyReadChunks }},
					perOp{"replychunks/op", func(m *Metrics) uint64 { return m.ReplyChunks }})
			})
		}
	}
}

// perOp is a requester counter a benchmark reports per call, as unit.
type perOp struct {
	unit string
	get  func(*Metrics) uint64
}

// benchCalls makes b.N calls of spec on c, one at a time, counting n
// bytes each, and reports each counter of counts (from cm) per call.
func benchCalls(b *testing.B, c *sunrpc.Client, cm *ClientMetrics, spec sunrpc.CallSpec, n int, counts ...perOp) {
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(n))
	before := cm.Metrics()
	for range b.N {
		if err := c.Call(ctx, spec); err != nil {
			b.Fatal(err)
		}
	}
	after := cm.Metrics()
	for _, k := range counts {
		b.ReportMetric(float64(k.get(&after)-k.get(&before))/float64(b.N), k.unit)
	}
}

// warmUp makes n NULL calls on c, so that the first sub-benchmark of a
// connection does not pay for its start (connection, first buffers).
func warmUp(b *testing.B, c *sunrpc.Client, n int) {
	for range n {
		if err := c.Null(context.Background(), tProg, tVers); err != nil {
			b.Fatal(err)
		}
	}
}
