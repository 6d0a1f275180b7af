package perftest

import (
	"context"
	"testing"
	"time"
)

// The verbs benchmarks run over software iWARP on loopback with CRC32c on.
// Only the data phase is timed; connection setup and teardown are not.
// Compare with the TCP baselines of the same size, in the same run.

// benchClient starts a server and connects a client for b.N messages.
func benchClient(b *testing.B, test Test, size ByteSize, pathMSS bool) (context.Context, *client) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	opts, err := Options{Test: test, Size: size, Iters: b.N, FPDUPathMSS: pathMSS}.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	srv, err := Listen(ctx, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	c, err := dial(ctx, srv.Addr().String(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.close()
		_ = srv.Close()
		cancel()
		<-served
	})
	return ctx, c
}

func benchBW(b *testing.B, test Test, pathMSS bool) {
	ctx, c := benchClient(b, test, 1<<20, pathMSS)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	b.ResetTimer()
	if err := c.burst(ctx, b.N); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if err := c.finish(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWrite1MiB: RDMA Writes of 1 MiB, DefaultDepth outstanding.
func BenchmarkWrite1MiB(b *testing.B) { benchBW(b, WriteBW, false) }

// BenchmarkWrite1MiBPathMSS: the same with the client's FPDUs sized by the
// path MSS (as Linux siw sizes them).
func BenchmarkWrite1MiBPathMSS(b *testing.B) { benchBW(b, WriteBW, true) }

// BenchmarkRead1MiB: RDMA Reads of 1 MiB, DefaultDepth outstanding.
func BenchmarkRead1MiB(b *testing.B) { benchBW(b, ReadBW, false) }

// BenchmarkSendLat64: one 64-byte Send ping-pong per op (ns/op is the
// round trip).
func BenchmarkSendLat64(b *testing.B) {
	ctx, c := benchClient(b, SendLat, 64, false)
	b.SetBytes(64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.pingPong(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	c.awaitHangup(ctx)
}

func benchTCPPair(b *testing.B) *tcpPair {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p, err := newTCPPair(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.release(); cancel() })
	return p
}

// BenchmarkTCPCopy1MiB: the baseline of the bandwidth benchmarks, 1 MiB
// messages over one TCP loopback stream.
func BenchmarkTCPCopy1MiB(b *testing.B) {
	p := benchTCPPair(b)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	b.ResetTimer()
	if _, err := stream(p.c, p.s, 1<<20, b.N); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkTCPPingPong64: the baseline of BenchmarkSendLat64, a 64-byte
// ping-pong over TCP loopback (ns/op is the round trip).
func BenchmarkTCPPingPong64(b *testing.B) {
	p := benchTCPPair(b)
	errc := make(chan error, 1)
	go func() { errc <- p.echo(64, b.N) }()
	ping, pong := make([]byte, 64), make([]byte, 64)
	b.SetBytes(64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.pingPong(ping, pong); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}
