package server

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// benchEnv serves a 64 MiB file over TCP and returns a client and its handle.
func benchEnv(b *testing.B) (nfsc, nfs3.FH) {
	root := b.TempDir()
	testenv.MustWrite(b, filepath.Join(root, "exp", "f"), make([]byte, 64<<20))
	env := startServer(b, root, []Export{{Path: "/exp"}})
	n := nfsc{b, env.client(b, false, 0, 0)}
	rootFH, _ := mnt(b, env.client(b, true, 0, 0), "/exp")
	fh, s := n.lookup(rootFH, "f")
	if s != nfs3.OK {
		b.Fatal(s)
	}
	return n, fh
}

// BenchmarkNull is the baseline of BenchmarkGetattr: an RPC round trip
// through the same client, transport and dispatcher, with no NFS work.
func BenchmarkNull(b *testing.B) {
	n, _ := benchEnv(b)
	spec := sunrpc.CallSpec{Prog: nfs3.Program, Vers: 3, Proc: nfs3.ProcNull}
	ctx := testenv.Context(b, 30*time.Second)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := n.c.Call(ctx, spec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGetattr(b *testing.B) {
	n, fh := benchEnv(b)
	args := nfs3.GetattrArgs{Object: fh}
	var res nfs3.GetattrRes
	spec := sunrpc.CallSpec{Prog: nfs3.Program, Vers: 3, Proc: nfs3.ProcGetattr,
		Args:    func(bd *sunrpc.Builder) { args.Encode(&bd.Encoder) },
		Results: func(d *xdr.Decoder, _ int) error { return res.Decode(d) }}
	ctx := testenv.Context(b, 30*time.Second)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := n.c.Call(ctx, spec); err != nil || res.Status != nfs3.OK {
			b.Fatal(err, res.Status)
		}
	}
}

func benchRead(b *testing.B, size int, random bool) {
	n, fh := benchEnv(b)
	args := nfs3.ReadArgs{File: fh, Count: uint32(size)}
	var res nfs3.ReadRes
	spec := sunrpc.CallSpec{Prog: nfs3.Program, Vers: 3, Proc: nfs3.ProcRead,
		Args:    func(bd *sunrpc.Builder) { args.Encode(&bd.Encoder) },
		Results: func(d *xdr.Decoder, _ int) error { return res.DecodeMax(d, nil, false, size) }}
	ctx := testenv.Context(b, 30*time.Second)
	r := rand.New(rand.NewPCG(1, 1))
	blocks := uint64(64<<20) / uint64(size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	i := uint64(0)
	for b.Loop() {
		if random {
			args.Offset = r.Uint64N(blocks) * uint64(size)
		} else {
			args.Offset = i % blocks * uint64(size)
			i++
		}
		if err := n.c.Call(ctx, spec); err != nil || res.Status != nfs3.OK || len(res.Data) != size {
			b.Fatal(err, res.Status, len(res.Data))
		}
	}
}

func BenchmarkRead1MiB(b *testing.B)       { benchRead(b, 1<<20, false) }
func BenchmarkRandomRead4KiB(b *testing.B) { benchRead(b, 4<<10, true) }

func BenchmarkWrite1MiB(b *testing.B) {
	n, fh := benchEnv(b)
	data := make([]byte, 1<<20)
	args := nfs3.WriteArgs{File: fh, Stable: nfs3.Unstable, Data: data}
	var res nfs3.WriteRes
	spec := sunrpc.CallSpec{Prog: nfs3.Program, Vers: 3, Proc: nfs3.ProcWrite,
		Results: func(d *xdr.Decoder, _ int) error { return res.Decode(d) }}
	spec.Args = func(bd *sunrpc.Builder) { // WRITE3args up to the data, then the data as the DDP-eligible item
		args.File.Encode(&bd.Encoder)
		bd.Uint64(args.Offset)
		bd.Uint32(uint32(len(data)))
		bd.Uint32(uint32(args.Stable))
		bd.Payload(data)
	}
	ctx := testenv.Context(b, 30*time.Second)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	i := uint64(0)
	for b.Loop() {
		args.Offset = i % 64 << 20
		i++
		if err := n.c.Call(ctx, spec); err != nil || res.Status != nfs3.OK {
			b.Fatal(err, res.Status)
		}
	}
}
