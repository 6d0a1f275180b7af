package client

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/exporttest"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
	"k8s.io/klog/v2"
)

// Benchmarks of the client against three servers in one run, on
// 127.0.0.1: NFS-Ganesha over TCP (a third-party server), our export server
// over TCP, and our export server over RPC-over-RDMA (software iWARP, CRC
// on). Read them as ratios between the targets of the same run (hack/bench
// prints them), not as absolute numbers.

const benchFileSize = 64 << 20

// target mounts one server and returns a client and a fresh directory.
type target struct {
	name  string
	mount func(b *testing.B) (*Client, nfs3.FH)
}

var targets = []target{
	{"ganesha-tcp", func(b *testing.B) (*Client, nfs3.FH) { return mountT(b) }},
	{"ours-tcp", func(b *testing.B) (*Client, nfs3.FH) { return mountOurs(b, "tcp") }},
	{"ours-rdma", func(b *testing.B) (*Client, nfs3.FH) { return mountOurs(b, "rdma") }},
	{"ours-rdma-v1", func(b *testing.B) (*Client, nfs3.FH) { return mountOurs(b, "rdma-v1") }},
}

// mountOurs starts our export server on a temporary directory (NFS over
// TCP and, for proto "rdma", over RPC-over-RDMA, version 2 between our
// peers; "rdma-v1": the client speaks version 1 only; "rdma-norprc":
// version 2 without responder-provided Read chunks) and mounts it.
func mountOurs(b *testing.B, proto string) (*Client, nfs3.FH) {
	b.Helper()
	return mountOursWith(b, proto, 1, 0)
}

// mountOursN is mountOurs with nconnect connections to the NFS service.
func mountOursN(b *testing.B, proto string, nconnect int) (*Client, nfs3.FH) {
	b.Helper()
	return mountOursWith(b, proto, nconnect, 0)
}

// mountOursMap is mountOurs with the server's READ mappings bounded by
// readMap bytes (nfsserver.Options.ReadMapBytes; 0: READ copies).
func mountOursMap(b *testing.B, proto string, readMap int64) (*Client, nfs3.FH) {
	b.Helper()
	return mountOursWith(b, proto, 1, readMap)
}

// mountOursWith is mountOurs with nconnect connections and the server's
// READ mappings bounded by readMap bytes.
func mountOursWith(b *testing.B, proto string, nconnect int, readMap int64) (*Client, nfs3.FH) {
	b.Helper()
	rdma := proto == "rdma" || proto == "rdma-v1" || proto == "rdma-norprc"
	// send-based DDP on at both ends, as driver server and a proto=rdma
	// mount run by default (version 2 only)
	e := exporttest.Start(b, exporttest.Options{
		Exports: []nfsserver.Export{{Path: "/"}}, ReadMapBytes: readMap, RDMA: rdma,
		SIW: siw.Config{RTRDelay: -1}, RDMAOptions: rpcrdma.ServerOptions{SendDDP: true, Inline: rpcrdma.SDDPInline},
	})
	opts := Options{
		Server:    "127.0.0.1",
		NFSPort:   e.NFSPort,
		MountPort: e.MntPort,
		Export:    "/",
		AuthSys:   sunrpc.AuthSysParams{MachineName: "bench"},
		NConnect:  nconnect,
	}
	if rdma {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(e.RDMAPort))
		opts.Transport = "rdma"
		co := rpcrdma.ClientOptions{Versions: &rpcrdma.VersionCache{}, SendDDP: true, Inline: rpcrdma.SDDPInline}
		if proto == "rdma-v1" {
			co.MaxVersion, co.SendDDP, co.Inline = 1, false, 0
		}
		co.NoResponderReadChunks = proto == "rdma-norprc"
		opts.Dial = rpcrdma.Dialer(siw.NewDevice(siw.Config{RTRDelay: -1}), addr, co)
	}
	ctx := context.Background()
	mctx, mcancel := context.WithTimeout(ctx, 20*time.Second)
	defer mcancel()
	c, err := Mount(mctx, opts)
	if err != nil {
		b.Fatal("mount our server:", err)
	}
	b.Cleanup(func() { c.Unmount(context.Background()) })
	return c, c.Root()
}

// benchFile mounts t and returns a client and a 64 MiB file.
func benchFile(b *testing.B, t target) (*Client, nfs3.FH) {
	c, dir := t.mount(b)
	ctx := context.Background()
	f := c.OpenFile(mustCreate(b, c, dir, "bench"))
	if _, err := f.WriteAt(ctx, randBytes(benchFileSize, 99), 0); err != nil {
		b.Fatal(err)
	}
	if err := f.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	return c, f.FH()
}

func forTargets(b *testing.B, f func(b *testing.B, t target)) { forTargetsIn(b, targets, f) }

// forTargetsIn is forTargets over ts.
func forTargetsIn(b *testing.B, ts []target, f func(b *testing.B, t target)) {
	// servers' logs would land in the middle of benchmark result lines
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	b.Cleanup(func() { klog.SetOutput(os.Stderr); klog.LogToStderr(true) })
	for _, t := range ts {
		b.Run(t.name, func(b *testing.B) { f(b, t) })
	}
}

// BenchmarkSeqRead1M: one 1 MiB READ per op into the caller's buffer,
// sequential offsets.
func BenchmarkSeqRead1M(b *testing.B) {
	forTargets(b, func(b *testing.B, t target) {
		c, fh := benchFile(b, t)
		ctx := context.Background()
		buf := make([]byte, 1<<20)
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		off := 0
		for b.Loop() {
			if _, err := c.ReadAt(ctx, fh, buf, int64(off)); err != nil {
				b.Fatal(err)
			}
			off = (off + len(buf)) % benchFileSize
		}
	})
}

// BenchmarkSeqWrite1M: one 1 MiB UNSTABLE WRITE per op, sequential
// offsets, one COMMIT per 64 MiB and at the end (counted).
func BenchmarkSeqWrite1M(b *testing.B) {
	forTargets(b, func(b *testing.B, t target) {
		c, dir := t.mount(b)
		ctx := context.Background()
		fh := mustCreate(b, c, dir, "bench-w")
		buf := randBytes(1<<20, 5)
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		off := 0
		for b.Loop() {
			if _, err := c.Write(ctx, fh, uint64(off), buf, nfs3.Unstable); err != nil {
				b.Fatal(err)
			}
			off += len(buf)
			if off == benchFileSize {
				off = 0
				if _, err := c.Commit(ctx, fh, 0, 0); err != nil {
					b.Fatal(err)
				}
			}
		}
		if _, err := c.Commit(ctx, fh, 0, 0); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkRandRead4K: one 4 KiB READ per op at a random aligned offset,
// one call at a time (latency).
func BenchmarkRandRead4K(b *testing.B) {
	forTargets(b, func(b *testing.B, t target) {
		c, fh := benchFile(b, t)
		ctx := context.Background()
		buf := make([]byte, 4096)
		b.SetBytes(4096)
		b.ReportAllocs()
		for b.Loop() {
			off := uint64(rand.IntN(benchFileSize/4096)) * 4096
			if _, _, _, err := c.Read(ctx, fh, off, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRandRead4KParallel: the same with GOMAXPROCS*4 callers sharing
// the connection (throughput).
func BenchmarkRandRead4KParallel(b *testing.B) {
	forTargets(b, func(b *testing.B, t target) {
		c, fh := benchFile(b, t)
		ctx := context.Background()
		b.SetBytes(4096)
		b.ReportAllocs()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 4096)
			for pb.Next() {
				off := uint64(rand.IntN(benchFileSize/4096)) * 4096
				if _, _, _, err := c.Read(ctx, fh, off, buf); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkGetattr: GETATTR rate, one call at a time.
func BenchmarkGetattr(b *testing.B) {
	forTargets(b, func(b *testing.B, t target) {
		c, dir := t.mount(b)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Getattr(ctx, dir); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReaddirplus2000: listing a directory of 2,000 files with
// READDIRPLUS (names, handles and attributes), one listing per op; the
// replies are larger than the inline threshold (a Reply chunk in version
// 1, continuation or a Reply chunk in version 2).
func BenchmarkReaddirplus2000(b *testing.B) {
	// and "ours-rdma-norprc": version 2 without responder-provided Read
	// chunks, the replies in the Reply chunks the client offers
	ts := append(targets[:len(targets):len(targets)], target{"ours-rdma-norprc", func(b *testing.B) (*Client, nfs3.FH) { return mountOurs(b, "rdma-norprc") }})
	forTargetsIn(b, ts, func(b *testing.B, t target) {
		c, dir := t.mount(b)
		ctx := context.Background()
		for i := range 2000 {
			mustCreate(b, c, dir, fmt.Sprintf("entry-%04d", i))
		}
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			for _, err := range c.Readdirplus(ctx, dir) {
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			if n < 2000 {
				b.Fatalf("listed %d entries, want 2000 and more", n)
			}
		}
	})
}

// BenchmarkNConnect: nconnect=4 against nconnect=1 in the same run, over
// TCP and RPC-over-RDMA (software iWARP) to our server. "read-16MiB": one
// ReadAt of 16 MiB per op, sixteen 1 MiB READs in flight (Window);
// "getattr-parallel": GETATTR from 8 x GOMAXPROCS callers (time per call).
func BenchmarkNConnect(b *testing.B) {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	b.Cleanup(func() { klog.SetOutput(os.Stderr); klog.LogToStderr(true) })
	for _, proto := range []string{"tcp", "rdma"} {
		for _, n := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/read-16MiB/nconnect=%d", proto, n), func(b *testing.B) {
				c, dir := mountOursN(b, proto, n)
				ctx := context.Background()
				f := c.OpenFile(mustCreate(b, c, dir, "bench"))
				if _, err := f.WriteAt(ctx, randBytes(benchFileSize, 99), 0); err != nil {
					b.Fatal(err)
				}
				if err := f.Commit(ctx); err != nil {
					b.Fatal(err)
				}
				buf := make([]byte, 16<<20)
				b.SetBytes(int64(len(buf)))
				b.ReportAllocs()
				off := 0
				for b.Loop() {
					if _, err := c.ReadAt(ctx, f.FH(), buf, int64(off)); err != nil {
						b.Fatal(err)
					}
					off = (off + len(buf)) % benchFileSize
				}
			})
			b.Run(fmt.Sprintf("%s/getattr-parallel/nconnect=%d", proto, n), func(b *testing.B) {
				c, dir := mountOursN(b, proto, n)
				ctx := context.Background()
				b.ReportAllocs()
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := c.Getattr(ctx, dir); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
