package server

import (
	"context"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
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

// BenchmarkCreateRemove is a CREATE (UNCHECKED, mode 0644) and a REMOVE
// of the same name: as uid 0 (the new file is already the caller's) and
// as uid 1000 (the server makes it the caller's) in a static export, and
// as uid 1000 in a volume export (its usage charged). cpu-ns/op is the
// CPU time of client and server per pair.
func BenchmarkCreateRemove(b *testing.B) {
	for _, uid := range []uint32{0, 1000} {
		b.Run("uid"+strconv.Itoa(int(uid)), func(b *testing.B) {
			root := benchExportRoot(b)
			env := startServer(b, root, []Export{{Path: "/exp"}})
			dir, _ := mnt(b, env.client(b, true, 0, 0), "/exp")
			benchCreateRemove(b, nfsc{b, env.client(b, false, uid, uid)}, dir)
		})
	}
	b.Run("volume", func(b *testing.B) {
		e, dir := benchVolume(b)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(e.nfsPort))
		benchCreateRemove(b, nfsc{b, authSysClient(b, addr, 1000, 1000)}, dir)
	})
}

// benchExportRoot makes a root holding an export "exp" open to every
// user (mode 0777) and returns the root.
func benchExportRoot(b *testing.B) string {
	root := b.TempDir()
	if err := os.Mkdir(filepath.Join(root, "exp"), 0o777); err != nil {
		b.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "exp"), 0o777); err != nil {
		b.Fatal(err)
	}
	return root
}

// benchVolume serves a volume export "vol" of 1 GiB, granted to
// 127.0.0.1 and open to every user (mode 0777), and returns its env and
// the handle of its root.
func benchVolume(b *testing.B) (*volEnv, nfs3.FH) {
	root := b.TempDir()
	if err := os.Mkdir(filepath.Join(root, "vol"), 0o777); err != nil {
		b.Fatal(err)
	}
	e := startVolume(b, root, b.TempDir(), false, 1<<30, "n")
	if err := os.Chmod(filepath.Join(root, "vol"), 0o777); err != nil {
		b.Fatal(err)
	}
	dir, ms := mnt(b, e.rpcClient(b, true), "/vol")
	if ms != mount3.OK {
		b.Fatal("MNT /vol: ", ms)
	}
	return e, dir
}

// BenchmarkDispatchCreateRemove is BenchmarkCreateRemove's pair through
// the server's dispatcher in process, with no transport or client: the
// server's own work per pair (decoding, the DRC, the file system calls,
// encoding).
func BenchmarkDispatchCreateRemove(b *testing.B) {
	for _, uid := range []uint32{0, 1000} {
		b.Run("uid"+strconv.Itoa(int(uid)), func(b *testing.B) {
			srv, dir := benchDispatchServer(b)
			benchDispatchCreateRemove(b, srv, uid, dir)
		})
	}
	b.Run("volume", func(b *testing.B) {
		e, dir := benchVolume(b)
		benchDispatchCreateRemove(b, e.srv, 1000, dir)
	})
}

// dispatcher returns a function that dispatches proc with args through
// srv's dispatcher as uid, no transport (a new XID each, as the DRC would
// answer a repeated one from its cache), and decodes its result into res.
func dispatcher(b *testing.B, srv *Server, uid uint32) func(proc uint32, args interface{ Encode(*xdr.Encoder) }, res interface{ Decode(*xdr.Decoder) error }) {
	cred, err := (&sunrpc.AuthSysParams{MachineName: "bench", UID: uid, GID: uid}).Credential()
	if err != nil {
		b.Fatal(err)
	}
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 700}
	xid := uint32(0)
	var req sunrpc.Request
	return func(proc uint32, args interface{ Encode(*xdr.Encoder) }, res interface{ Decode(*xdr.Decoder) error }) {
		xid++
		h := sunrpc.CallHeader{XID: xid, RPCVers: sunrpc.RPCVersion, Prog: nfs3.Program, Vers: nfs3.Version, Proc: proc, Cred: cred}
		e := xdr.NewEncoder(make([]byte, 0, 256))
		h.Encode(e)
		args.Encode(e)
		req.Reset(e.Bytes(), nil, peer, "bench")
		bd := sunrpc.NewBuilder(make([]byte, 0, 512))
		if !srv.Dispatcher().Dispatch(context.Background(), &req, bd) {
			b.Fatal("call dropped")
		}
		var d xdr.Decoder
		d.Reset(bd.Message().Head)
		if rh, err := sunrpc.DecodeReplyHeader(&d); err != nil || rh.Accept != sunrpc.Success {
			b.Fatalf("reply %+v, %v", rh, err)
		}
		if err := res.Decode(&d); err != nil {
			b.Fatal(err)
		}
		bd.RunAfterSend()
	}
}

// benchDispatchServer starts a server of one export (/exp of
// benchExportRoot) with no transport and returns it and the export's root
// handle.
func benchDispatchServer(b *testing.B) (*Server, nfs3.FH) {
	srv, err := New(Options{Root: benchExportRoot(b), Exports: []Export{{Path: "/exp"}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	t := srv.exports.Load()
	dir, _ := nfs3.NewFH(t.list[0].rootFH[:t.list[0].fhLen])
	return srv, dir
}

func benchDispatchCreateRemove(b *testing.B, srv *Server, uid uint32, dir nfs3.FH) {
	call := dispatcher(b, srv, uid)
	cargs := nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: "f"},
		How: nfs3.CreateHow{Mode: nfs3.Unchecked, Attr: nfs3.Sattr{SetMode: true, Mode: 0o644}}}
	rargs := nfs3.RemoveArgs{Object: cargs.Where}
	var cres nfs3.CreateRes
	var rres nfs3.RemoveRes
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if call(nfs3.ProcCreate, &cargs, &cres); cres.Status != nfs3.OK {
			b.Fatal("CREATE: ", cres.Status)
		}
		if call(nfs3.ProcRemove, &rargs, &rres); rres.Status != nfs3.OK {
			b.Fatal("REMOVE: ", rres.Status)
		}
	}
}

func benchCreateRemove(b *testing.B, n nfsc, dir nfs3.FH) {
	ctx := testenv.Context(b, 30*time.Second)
	cargs := nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: "f"},
		How: nfs3.CreateHow{Mode: nfs3.Unchecked, Attr: nfs3.Sattr{SetMode: true, Mode: 0o644}}}
	rargs := nfs3.RemoveArgs{Object: cargs.Where}
	var cres nfs3.CreateRes
	var rres nfs3.RemoveRes
	create := sunrpc.CallSpec{Prog: nfs3.Program, Vers: 3, Proc: nfs3.ProcCreate,
		Args:    func(bd *sunrpc.Builder) { cargs.Encode(&bd.Encoder) },
		Results: func(d *xdr.Decoder, _ int) error { return cres.Decode(d) }}
	remove := sunrpc.CallSpec{Prog: nfs3.Program, Vers: 3, Proc: nfs3.ProcRemove,
		Args:    func(bd *sunrpc.Builder) { rargs.Encode(&bd.Encoder) },
		Results: func(d *xdr.Decoder, _ int) error { return rres.Decode(d) }}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := testenv.CPUTime(b)
	for b.Loop() {
		if err := n.c.Call(ctx, create); err != nil || cres.Status != nfs3.OK {
			b.Fatal("CREATE: ", err, cres.Status)
		}
		if err := n.c.Call(ctx, remove); err != nil || rres.Status != nfs3.OK {
			b.Fatal("REMOVE: ", err, rres.Status)
		}
	}
	b.ReportMetric(float64(testenv.CPUTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// inlineWrite encodes a WRITE's data inline, as a call over TCP carries it.
type inlineWrite struct{ *nfs3.WriteArgs }

func (w inlineWrite) Encode(e *xdr.Encoder) { w.EncodeInline(e) }

// BenchmarkDispatchTruncateWrite is what open(O_TRUNC), a 4 KiB write and
// close of one file cost the server through its dispatcher, no transport:
// a SETATTR of size 0 and an UNSTABLE WRITE of 4 KiB.
func BenchmarkDispatchTruncateWrite(b *testing.B) {
	srv, dir := benchDispatchServer(b)
	call := dispatcher(b, srv, 0)
	cargs := nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: "f"},
		How: nfs3.CreateHow{Mode: nfs3.Unchecked, Attr: nfs3.Sattr{SetMode: true, Mode: 0o644}}}
	var cres nfs3.CreateRes
	if call(nfs3.ProcCreate, &cargs, &cres); cres.Status != nfs3.OK || !cres.Obj.Set {
		b.Fatal("CREATE: ", cres.Status)
	}
	sargs := nfs3.SetattrArgs{Object: cres.Obj.FH, Attr: nfs3.Sattr{SetSize: true}}
	wargs := nfs3.WriteArgs{File: cres.Obj.FH, Stable: nfs3.Unstable, Data: make([]byte, 4096)}
	var sres nfs3.SetattrRes
	var wres nfs3.WriteRes
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if call(nfs3.ProcSetattr, &sargs, &sres); sres.Status != nfs3.OK {
			b.Fatal("SETATTR: ", sres.Status)
		}
		if call(nfs3.ProcWrite, inlineWrite{&wargs}, &wres); wres.Status != nfs3.OK {
			b.Fatal("WRITE: ", wres.Status)
		}
	}
}
