package client

import (
	"context"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
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
		cpu0 := testenv.CPUTime(b)
		off, n := 0, 0
		for b.Loop() {
			if _, err := c.ReadAt(ctx, fh, buf, int64(off)); err != nil {
				b.Fatal(err)
			}
			off = (off + len(buf)) % benchFileSize
			n++
		}
		testenv.ReportCPUPerGiB(b, cpu0, float64(n)*float64(len(buf)))
	})
}
