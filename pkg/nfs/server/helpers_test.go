package server

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// serveRDMA opens the NFS/RDMA listener on addr through dev, the
// transport logging to srv's Logger unless opts has one, and serves srv
// on it until ctx ends (srv.ServeRDMA), as package exportd does; these
// tests cannot import exportd (it imports this package).
func serveRDMA(ctx context.Context, srv *Server, dev verbs.Device, addr string, opts rpcrdma.ServerOptions) error {
	if opts.Logger == nil {
		opts.Logger = srv.Logger()
	}
	l, err := rpcrdma.Listen(ctx, dev, addr, opts)
	if err != nil {
		return err
	}
	return srv.ServeRDMA(ctx, l)
}

// testEnv is a running server on 127.0.0.1 over a root directory.
type testEnv struct {
	root             string
	srv              *Server
	nfsAddr, mntAddr string
	cancel           context.CancelFunc
	done             chan error
}

// startServer serves root with exps on ephemeral ports until the test ends.
func startServer(t testing.TB, root string, exps []Export) *testEnv {
	t.Helper()
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	srv, err := New(Options{Root: root, Exports: exps})
	if err != nil {
		t.Fatal(err)
	}
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &testEnv{root: root, srv: srv, nfsAddr: nl.Addr().String(), mntAddr: ml.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { e.done <- srv.Serve(ctx, nl, ml) }()
	t.Cleanup(e.stop)
	return e
}

func (e *testEnv) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	<-e.done
	e.srv.Close()
	e.cancel = nil
}

// client returns an AUTH_SYS client of the NFS (or MOUNT) port.
func (e *testEnv) client(t testing.TB, mount bool, uid, gid uint32, gids ...uint32) *sunrpc.Client {
	t.Helper()
	addr := e.nfsAddr
	if mount {
		addr = e.mntAddr
	}
	return authSysClient(t, addr, uid, gid, gids...)
}

// authSysClient returns an AUTH_SYS client (machine name "test") of the
// RPC server at addr over TCP, closed when the test ends.
func authSysClient(t testing.TB, addr string, uid, gid uint32, gids ...uint32) *sunrpc.Client {
	t.Helper()
	c, err := sunrpc.NewClient(sunrpc.TCPDialer(addr, sunrpc.TCPOptions{}), sunrpc.ClientOptions{
		AuthSys: &sunrpc.AuthSysParams{MachineName: "test", UID: uid, GID: gid, GIDs: gids},
		Retry:   sunrpc.RetryPolicy{Soft: true, Retries: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rpc calls proc of prog with args and decodes res.
func rpc(t testing.TB, c *sunrpc.Client, prog, proc uint32, args interface{ Encode(*xdr.Encoder) }, res interface{ Decode(*xdr.Decoder) error }) error {
	t.Helper()
	vers := uint32(nfs3.Version)
	if prog == mount3.Program {
		vers = mount3.Version
	}
	return c.Call(testenv.Context(t, 30*time.Second), sunrpc.CallSpec{
		Prog: prog, Vers: vers, Proc: proc,
		Args: func(b *sunrpc.Builder) {
			if args != nil {
				args.Encode(&b.Encoder)
			}
		},
		Results: func(d *xdr.Decoder, _ int) error {
			if res == nil {
				return nil
			}
			return res.Decode(d)
		},
	})
}

// nfsc is an NFS test client with helpers that fail the test on RPC errors.
type nfsc struct {
	t testing.TB
	c *sunrpc.Client
}

func (n nfsc) do(proc uint32, args interface{ Encode(*xdr.Encoder) }, res interface{ Decode(*xdr.Decoder) error }) {
	n.t.Helper()
	if err := rpc(n.t, n.c, nfs3.Program, proc, args, res); err != nil {
		n.t.Fatalf("%s: %v", nfs3.ProcName(proc), err)
	}
}

func (n nfsc) lookup(dir nfs3.FH, name string) (nfs3.FH, nfs3.Status) {
	n.t.Helper()
	var r nfs3.LookupRes
	n.do(nfs3.ProcLookup, &nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: dir, Name: name}}, &r)
	return r.Object, r.Status
}

func (n nfsc) getattr(fh nfs3.FH) (nfs3.Fattr, nfs3.Status) {
	n.t.Helper()
	var r nfs3.GetattrRes
	n.do(nfs3.ProcGetattr, &nfs3.GetattrArgs{Object: fh}, &r)
	return r.Attr, r.Status
}

func (n nfsc) create(dir nfs3.FH, name string, how nfs3.CreateHow) nfs3.CreateRes {
	n.t.Helper()
	var r nfs3.CreateRes
	n.do(nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name}, How: how}, &r)
	return r
}

func (n nfsc) mkdir(dir nfs3.FH, name string, mode uint32) nfs3.CreateRes {
	n.t.Helper()
	var r nfs3.CreateRes
	n.do(nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name}, Attr: nfs3.Sattr{SetMode: true, Mode: mode}}, &r)
	return r
}

// inline encodes a DDP message inline (TCP).
type inline struct{ m nfs3.DDPMessage }

func (i inline) Encode(e *xdr.Encoder) { i.m.EncodeInline(e) }

type ddpRes struct{ m nfs3.DDPMessage }

func (r ddpRes) Decode(d *xdr.Decoder) error { return r.m.Decode(d, nil, false) }

func (n nfsc) write(fh nfs3.FH, off uint64, data []byte, stable nfs3.StableHow) nfs3.WriteRes {
	n.t.Helper()
	var r nfs3.WriteRes
	n.do(nfs3.ProcWrite, inline{&nfs3.WriteArgs{File: fh, Offset: off, Stable: stable, Data: data}}, &r)
	return r
}

func (n nfsc) read(fh nfs3.FH, off uint64, count uint32) nfs3.ReadRes {
	n.t.Helper()
	var r nfs3.ReadRes
	n.do(nfs3.ProcRead, &nfs3.ReadArgs{File: fh, Offset: off, Count: count}, ddpRes{&r})
	r.Data = append([]byte(nil), r.Data...)
	return r
}

// mnt mounts path and returns its handle, or the MOUNT status.
func mnt(t testing.TB, c *sunrpc.Client, path string) (nfs3.FH, mount3.Status) {
	t.Helper()
	var r mount3.MntRes
	if err := rpc(t, c, mount3.Program, mount3.ProcMnt, &mount3.MntArgs{Path: path}, &r); err != nil {
		t.Fatalf("MNT %s: %v", path, err)
	}
	return r.FH, r.Status
}

func wantStatus(t testing.TB, what string, got, want nfs3.Status) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: status %v, want %v", what, got, want)
	}
}

func openForTest(root, sub string) (int, error) {
	return unix.Open(filepath.Join(root, sub), unix.O_PATH|unix.O_DIRECTORY, 0)
}

func closeForTest(fd int) { unix.Close(fd) }
