package client

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// Benchmarks against NFS-Ganesha over TCP on 127.0.0.1. They are to be
// read as ratios against the same benchmarks on other servers and
// transports in the same run, not as absolute numbers.

const benchFileSize = 64 << 20

// benchFile mounts Ganesha and returns a client and a 64 MiB file.
func benchFile(b *testing.B) (*Client, nfs3.FH) {
	c, dir := mountT(b)
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

// BenchmarkGaneshaSeqRead1M: one 1 MiB READ per op, sequential offsets.
func BenchmarkGaneshaSeqRead1M(b *testing.B) {
	c, fh := benchFile(b)
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
}

// BenchmarkGaneshaSeqWrite1M: one 1 MiB UNSTABLE WRITE per op, sequential
// offsets, one COMMIT per 64 MiB and at the end (counted).
func BenchmarkGaneshaSeqWrite1M(b *testing.B) {
	c, dir := mountT(b)
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
}

// BenchmarkGaneshaRandRead4K: one 4 KiB READ per op at a random aligned
// offset, one call at a time (latency).
func BenchmarkGaneshaRandRead4K(b *testing.B) {
	c, fh := benchFile(b)
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
}

// BenchmarkGaneshaRandRead4KParallel: the same with GOMAXPROCS*4 callers
// sharing the connection (throughput).
func BenchmarkGaneshaRandRead4KParallel(b *testing.B) {
	c, fh := benchFile(b)
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
}

// BenchmarkGaneshaGetattr: GETATTR rate, one call at a time.
func BenchmarkGaneshaGetattr(b *testing.B) {
	c, dir := mountT(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Getattr(ctx, dir); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGaneshaGetattrParallel: GETATTR rate with GOMAXPROCS*4 callers.
func BenchmarkGaneshaGetattrParallel(b *testing.B) {
	c, dir := mountT(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Getattr(ctx, dir); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkGaneshaReadAt16M: ReadAt of 16 MiB per op (16 READs of 1 MiB,
// Window in flight), sequential offsets.
func BenchmarkGaneshaReadAt16M(b *testing.B) {
	c, fh := benchFile(b)
	ctx := context.Background()
	buf := make([]byte, 16<<20)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	off := 0
	for b.Loop() {
		if _, err := c.ReadAt(ctx, fh, buf, int64(off)); err != nil {
			b.Fatal(err)
		}
		off = (off + len(buf)) % benchFileSize
	}
}

// BenchmarkGaneshaWriteAt16M: File.WriteAt of 16 MiB per op (UNSTABLE,
// pipelined) and a Commit per 64 MiB.
func BenchmarkGaneshaWriteAt16M(b *testing.B) {
	c, dir := mountT(b)
	ctx := context.Background()
	f := c.OpenFile(mustCreate(b, c, dir, "bench-wa"))
	buf := randBytes(16<<20, 6)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	off := 0
	for b.Loop() {
		if _, err := f.WriteAt(ctx, buf, int64(off)); err != nil {
			b.Fatal(err)
		}
		off += len(buf)
		if off == benchFileSize {
			off = 0
			if err := f.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := f.Commit(ctx); err != nil {
		b.Fatal(err)
	}
}
