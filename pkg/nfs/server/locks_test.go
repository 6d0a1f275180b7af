package server

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockd"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// lockEnv is a server with NFS, MOUNT, NLM and NSM on their own loopback ports.
type lockEnv struct {
	srv                       *Server
	nfsAddr, mntAddr, nlmAddr string
	cancel                    context.CancelFunc
	done                      chan error
}

func startLockServer(t *testing.T, opts Options) *lockEnv {
	t.Helper()
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var ls [4]net.Listener
	for i := range ls {
		if ls[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &lockEnv{srv: srv, nfsAddr: ls[0].Addr().String(), mntAddr: ls[1].Addr().String(), nlmAddr: ls[2].Addr().String(), cancel: cancel, done: make(chan error, 2)}
	go func() { e.done <- srv.Serve(ctx, ls[0], ls[1]) }()
	go func() { e.done <- srv.ServeLocks(ctx, ls[2], ls[3]) }()
	t.Cleanup(e.stop)
	return e
}

// stop stops serving and closes the server; it may be called again.
func (e *lockEnv) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	<-e.done
	<-e.done
	e.srv.Close()
	e.cancel = nil
}

// fhOf mounts export and looks name up in it.
func (e *lockEnv) fhOf(t *testing.T, export, name string) nfs3.FH {
	t.Helper()
	mc := authSysClient(t, e.mntAddr, 0, 0)
	var mr mount3.MntRes
	if err := rpc(t, mc, mount3.Program, mount3.ProcMnt, &mount3.MntArgs{Path: export}, &mr); err != nil || mr.Status != mount3.OK {
		t.Fatalf("MNT %s: %v %v", export, mr.Status, err)
	}
	n := nfsc{t, authSysClient(t, e.nfsAddr, 0, 0)}
	fh, st := n.lookup(mr.FH, name)
	if st != nfs3.OK {
		t.Fatalf("LOOKUP %s in %s: %v", name, export, st)
	}
	return fh
}

func nlmCall(t *testing.T, addr string, proc uint32, args nlm.Message, res nlm.Message) {
	t.Helper()
	c := authSysClient(t, addr, 0, 0)
	err := c.Call(testenv.Context(t, 30*time.Second), sunrpc.CallSpec{
		Prog: nlm.Program, Vers: nlm.Version, Proc: proc,
		Args:    func(b *sunrpc.Builder) { args.Encode(&b.Encoder) },
		Results: func(d *xdr.Decoder, _ int) error { return res.Decode(d) },
	})
	if err != nil {
		t.Fatalf("%s: %v", nlm.ProcName(proc), err)
	}
}

// TestLocksAcrossExports: a lock taken through one export's handle of a
// file conflicts with a request through another export's handle of the
// same file, from another client; a forged handle is NLM4_STALE_FH; a
// client outside the export's list NLM4_FAILED.
func TestLocksAcrossExports(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "a"), 0o755)
	os.WriteFile(filepath.Join(root, "a", "f"), []byte("data"), 0o644)
	os.MkdirAll(filepath.Join(root, "a", "closed"), 0o755)
	e := startLockServer(t, Options{Root: root, Exports: []Export{
		{Path: "/"}, {Path: "/a"},
		{Path: "/a/closed", Clients: []netip.Prefix{netip.MustParsePrefix("10.9.9.9/32")}},
	}})
	fhRoot := e.fhOf(t, "/", "a")
	n := nfsc{t, authSysClient(t, e.nfsAddr, 0, 0)}
	fh1, st := n.lookup(fhRoot, "f")
	if st != nfs3.OK {
		t.Fatal(st)
	}
	fh2 := e.fhOf(t, "/a", "f")
	if string(fh1.Bytes()) == string(fh2.Bytes()) {
		t.Fatal("test needs two different handles of one file")
	}
	var r nlm.Res
	nlmCall(t, e.nlmAddr, nlm.ProcLock, &nlm.LockArgs{Exclusive: true, Lock: nlm.Lock{CallerName: "pod-1", FH: fh1.Bytes(), OH: []byte("o1"), Svid: 1, Length: 0}}, &r)
	if r.Stat != nlm.Granted {
		t.Fatalf("LOCK: %v", r.Stat)
	}
	var tr nlm.TestRes
	nlmCall(t, e.nlmAddr, nlm.ProcTest, &nlm.TestArgs{Lock: nlm.Lock{CallerName: "pod-2", FH: fh2.Bytes(), OH: []byte("o2"), Svid: 1, Offset: 100, Length: 1}}, &tr)
	if tr.Stat != nlm.Denied || tr.Holder == nil || string(tr.Holder.OH) != "o1" {
		t.Fatalf("TEST through the other export: %+v", tr)
	}
	nlmCall(t, e.nlmAddr, nlm.ProcLock, &nlm.LockArgs{Lock: nlm.Lock{CallerName: "pod-2", FH: fh2.Bytes(), OH: []byte("o2"), Svid: 1}}, &r)
	if r.Stat != nlm.Denied {
		t.Fatalf("LOCK through the other export: %v", r.Stat)
	}
	forged := append([]byte(nil), fh1.Bytes()...)
	forged[len(forged)-1] ^= 1
	nlmCall(t, e.nlmAddr, nlm.ProcLock, &nlm.LockArgs{Lock: nlm.Lock{CallerName: "pod-2", FH: forged, OH: []byte("o2"), Svid: 1}}, &r)
	if r.Stat != nlm.StaleFH {
		t.Fatalf("LOCK with a forged handle: %v", r.Stat)
	}
	ex, _ := e.srv.exports.Load().find("/a/closed")
	if ex == nil || ex.Path != "/a/closed" {
		t.Fatal("no export /a/closed")
	}
	closedFH, err := e.srv.seal.makeFH(ex.id, e.srv.rootFD, "a/closed", 0)
	if err != nil {
		t.Fatal(err)
	}
	nlmCall(t, e.nlmAddr, nlm.ProcLock, &nlm.LockArgs{Lock: nlm.Lock{CallerName: "pod-2", FH: closedFH.Bytes(), OH: []byte("o2"), Svid: 1}}, &r)
	if r.Stat != nlm.Failed {
		t.Fatalf("LOCK by a client outside the export's list: %v", r.Stat)
	}
}

// TestLocksRestartReclaim: the export server restarted on the same lock
// state directory is in its grace period: a new lock is refused with
// NLM4_DENIED_GRACE_PERIOD and the client's reclaim is granted.
func TestLocksRestartReclaim(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f"), nil, 0o644)
	state := t.TempDir()
	opts := Options{Root: root, Exports: []Export{{Path: "/"}}, Locks: lockd.Options{StateDir: state, GracePeriod: time.Minute, NotifyFor: time.Second,
		LookupPort: func(context.Context, string, uint32, uint32) (int, error) { return 0, nil }}}
	e := startLockServer(t, opts)
	fh := e.fhOf(t, "/", "f")
	l := nlm.Lock{CallerName: "pod-1", FH: fh.Bytes(), OH: []byte("o1"), Svid: 1}
	var r nlm.Res
	nlmCall(t, e.nlmAddr, nlm.ProcLock, &nlm.LockArgs{Exclusive: true, Lock: l}, &r)
	if r.Stat != nlm.Granted {
		t.Fatal(r.Stat)
	}
	st := e.srv.Locks().State()
	e.stop()

	e2 := startLockServer(t, opts)
	if e2.srv.Locks().State() != st+2 || e2.srv.Locks().GraceRemaining() <= 0 {
		t.Fatalf("after restart: state %d (was %d), grace %v", e2.srv.Locks().State(), st, e2.srv.Locks().GraceRemaining())
	}
	l2 := nlm.Lock{CallerName: "pod-2", FH: fh.Bytes(), OH: []byte("o2"), Svid: 1}
	nlmCall(t, e2.nlmAddr, nlm.ProcLock, &nlm.LockArgs{Lock: l2}, &r)
	if r.Stat != nlm.DeniedGracePeriod {
		t.Fatalf("new lock in the grace period: %v", r.Stat)
	}
	nlmCall(t, e2.nlmAddr, nlm.ProcLock, &nlm.LockArgs{Exclusive: true, Lock: l, Reclaim: true}, &r)
	if r.Stat != nlm.Granted {
		t.Fatalf("reclaim: %v", r.Stat)
	}
	e2.srv.Locks().EndGrace()
	nlmCall(t, e2.nlmAddr, nlm.ProcLock, &nlm.LockArgs{Lock: l2}, &r)
	if r.Stat != nlm.Denied {
		t.Fatalf("after the grace period, against the reclaimed lock: %v", r.Stat)
	}
}

// TestLocksGrantedThroughRPCBind: the GRANTED callback finds the
// client's NLM service through the rpcbind on the client's address
// (Debian's rpcbind, started by testenv.NeedRPCBind when missing). When
// a lock manager of this host already holds NLM v4's mapping, the test
// client registers under a private program number instead and the
// server's lookup (lockd.RPCBindPort) asks for that number.
func TestLocksGrantedThroughRPCBind(t *testing.T) {
	rpcbind := testenv.NeedRPCBind(t)
	ctx := testenv.Context(t, 30*time.Second)
	m := sunrpc.Mapping{Prog: nlm.Program, Vers: nlm.Version, Prot: sunrpc.IPProtoTCP}
	var lookup func(context.Context, string, uint32, uint32) (int, error) // nil: the default, lockd.RPCBindPort
	if p, err := sunrpc.PortmapGetPort(ctx, rpcbind, m); err != nil || p != 0 {
		t.Logf("rpcbind already maps NLM v4 to port %d (%v); using a private program number", p, err)
		m.Prog = uint32(0x20000000 + os.Getpid()%0x1000000)
		lookup = func(ctx context.Context, host string, prog, vers uint32) (int, error) {
			if prog == nlm.Program {
				prog = m.Prog
			}
			return lockd.RPCBindPort(ctx, host, prog, vers)
		}
	}
	// the client's NLM service, answering GRANTED
	got := make(chan nlm.TestArgs, 1)
	cs := sunrpc.NewServer(nil)
	procs := make([]sunrpc.Handler, nlm.NumProcs)
	procs[nlm.ProcGranted] = func(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
		var a nlm.TestArgs
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return err
		}
		got <- a
		r := nlm.Res{Cookie: a.Cookie, Stat: nlm.Granted}
		r.Encode(&b.Encoder)
		return nil
	}
	cs.Register(nlm.Program, nlm.Version, procs) // the call names NLM whichever number rpcbind knows it by
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sunrpc.ServeTCP(sctx, cl, cs, sunrpc.TCPOptions{})
	m.Port = uint32(cl.Addr().(*net.TCPAddr).Port)
	unregister, err := RegisterRPCBind(ctx, rpcbind, []sunrpc.Mapping{m})
	if err != nil {
		t.Fatal(err)
	}
	defer unregister(context.Background())

	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f"), nil, 0o644)
	e := startLockServer(t, Options{Root: root, Exports: []Export{{Path: "/"}}, Locks: lockd.Options{LookupPort: lookup}})
	fh := e.fhOf(t, "/", "f")
	la := nlm.Lock{CallerName: "pod-1", FH: fh.Bytes(), OH: []byte("o1"), Svid: 1}
	lb := nlm.Lock{CallerName: "pod-2", FH: fh.Bytes(), OH: []byte("o2"), Svid: 2, Offset: 3, Length: 4}
	var r nlm.Res
	nlmCall(t, e.nlmAddr, nlm.ProcLock, &nlm.LockArgs{Exclusive: true, Lock: la}, &r)
	nlmCall(t, e.nlmAddr, nlm.ProcLock, &nlm.LockArgs{Block: true, Exclusive: true, Lock: lb}, &r)
	if r.Stat != nlm.Blocked {
		t.Fatalf("blocking LOCK: %v", r.Stat)
	}
	nlmCall(t, e.nlmAddr, nlm.ProcUnlock, &nlm.UnlockArgs{Lock: la}, &r)
	select {
	case a := <-got:
		if a.Lock.CallerName != "pod-2" || a.Lock.Svid != 2 || a.Lock.Offset != 3 || a.Lock.Length != 4 || string(a.Lock.FH) != string(fh.Bytes()) {
			t.Fatalf("GRANTED: %+v", a)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no GRANTED callback through rpcbind")
	}
}
