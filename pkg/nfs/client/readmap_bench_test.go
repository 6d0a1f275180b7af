package client

import (
	"context"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// readMapTargets are our server over TCP and over RDMA with READ answered
// from mappings of the file (map: 256 MiB of windows) and by pread
// (copy), in the same run.
var readMapTargets = []target{
	{"tcp-map", func(b *testing.B) (*Client, nfs3.FH) { return mountOursMap(b, "tcp", 256<<20) }},
	{"tcp-copy", func(b *testing.B) (*Client, nfs3.FH) { return mountOursMap(b, "tcp", 0) }},
	{"rdma-map", func(b *testing.B) (*Client, nfs3.FH) { return mountOursMap(b, "rdma", 256<<20) }},
	{"rdma-copy", func(b *testing.B) (*Client, nfs3.FH) { return mountOursMap(b, "rdma", 0) }},
}

// BenchmarkSeqRead1MReadMap is BenchmarkSeqRead1M against readMapTargets,
// also reporting cpu-s/GiB: the CPU time (user and system, rusage) of the
// test process, which holds the client and the server, per GiB read.
func BenchmarkSeqRead1MReadMap(b *testing.B) {
	forTargetsIn(b, readMapTargets, func(b *testing.B, t target) {
		c, fh := benchFile(b, t)
		ctx := context.Background()
		buf := make([]byte, 1<<20)
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		var r0, r1 unix.Rusage
		unix.Getrusage(unix.RUSAGE_SELF, &r0)
		off, n := 0, 0
		for b.Loop() {
			if _, err := c.ReadAt(ctx, fh, buf, int64(off)); err != nil {
				b.Fatal(err)
			}
			off = (off + len(buf)) % benchFileSize
			n++
		}
		unix.Getrusage(unix.RUSAGE_SELF, &r1)
		cpu := float64(r1.Utime.Nano()+r1.Stime.Nano()-r0.Utime.Nano()-r0.Stime.Nano()) / 1e9
		b.ReportMetric(cpu/(float64(n)*float64(len(buf))/(1<<30)), "cpu-s/GiB")
	})
}
