package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// drcClock is a fake clock for the cache's expiry.
type drcClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *drcClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *drcClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// drcEnv is a running export server (export /exp) whose NFS program has
// a duplicate request cache with a fake clock, and a way to open raw
// connections to it over TCP or RPC-over-RDMA (software iWARP).
type drcEnv struct {
	env   *testEnv
	cache *replyCache
	clock *drcClock
	dir   nfs3.FH // /exp
	n     nfsc    // an ordinary client, for LOOKUP and GETATTR
	cred  sunrpc.OpaqueAuth
	dial  func(t *testing.T) sunrpc.ClientTransport
	rdma  *rpcrdma.Server // the RPC-over-RDMA listener, for "rdma"
}

func newDRCEnv(t *testing.T, proto string, cfg drcConfig) *drcEnv {
	t.Helper()
	root, exps := layout(t)
	env := startServer(t, root, exps)
	clock := &drcClock{t: time.Unix(1_700_000_000, 0)}
	cfg.Now = clock.Now
	cache := newReplyCache(cfg)
	env.srv.rpc.Register(nfs3.Program, nfs3.Version, env.srv.nfsHandlersWith(cache))
	dir, st := mnt(t, env.client(t, true, 0, 0), "/exp")
	if st != mount3.OK {
		t.Fatalf("MNT /exp: %v", st)
	}
	cred, err := (&sunrpc.AuthSysParams{MachineName: "drc-test", UID: 0, GID: 0}).Credential()
	if err != nil {
		t.Fatal(err)
	}
	e := &drcEnv{env: env, cache: cache, clock: clock, dir: dir, n: nfsc{t, env.client(t, false, 0, 0)}, cred: cred}
	switch proto {
	case "tcp":
		e.dial = func(t *testing.T) sunrpc.ClientTransport {
			t.Helper()
			tr, err := sunrpc.DialTCP(testenv.Context(t, 30*time.Second), env.nfsAddr, sunrpc.TCPOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tr.Close() })
			return tr
		}
	case "rdma":
		ctx, cancel := context.WithCancel(context.Background())
		l, err := rpcrdma.Listen(ctx, siw.NewDevice(siw.Config{RTRDelay: -1}), "127.0.0.1:0", rpcrdma.ServerOptions{Credits: 8})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- l.Serve(ctx, env.srv.Dispatcher()) }()
		t.Cleanup(func() { cancel(); <-served })
		dev := siw.NewDevice(siw.Config{RTRDelay: -1})
		addr := l.Addr().String()
		e.rdma = l
		e.dial = func(t *testing.T) sunrpc.ClientTransport {
			t.Helper()
			tr, err := rpcrdma.Dial(testenv.Context(t, 30*time.Second), dev, addr, rpcrdma.ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tr.Close() })
			return tr
		}
	default:
		t.Fatalf("unknown transport %q", proto)
	}
	return e
}

// encodeArgs encodes NFS arguments into a call; a DDP-eligible argument
// (WRITE data, SYMLINK path) is marked as the Builder's payload, so that
// RPC-over-RDMA moves it in a Read chunk.
func encodeArgs(b *sunrpc.Builder, args any) {
	switch a := args.(type) {
	case nfs3.DDPMessage:
		b.MarkPayload(a.Encode(&b.Encoder))
	case interface{ Encode(*xdr.Encoder) }:
		a.Encode(&b.Encoder)
	case []byte:
		b.Fixed(a)
	}
}

// rawCall sends NFS procedure proc with XID xid and credential cred over
// tr (no retransmission, no XID of its own) and returns the whole reply
// message.
func rawCall(ctx context.Context, tr sunrpc.ClientTransport, xid, proc uint32, cred sunrpc.OpaqueAuth, args any) ([]byte, error) {
	b := sunrpc.NewBuilder(nil)
	h := sunrpc.CallHeader{XID: xid, RPCVers: sunrpc.RPCVersion, Prog: nfs3.Program, Vers: nfs3.Version, Proc: proc, Cred: cred}
	h.Encode(&b.Encoder)
	encodeArgs(b, args)
	r, err := tr.RoundTrip(ctx, &sunrpc.Call{XID: xid, Msg: b.Message(), MaxReplySize: 64 + nfs3.MaxResultSize(proc, args)})
	if err != nil {
		return nil, err
	}
	defer r.Release()
	return bytes.Clone(r.Body), nil
}

func (e *drcEnv) call(t *testing.T, tr sunrpc.ClientTransport, xid, proc uint32, args any) []byte {
	t.Helper()
	body, err := rawCall(testenv.Context(t, 30*time.Second), tr, xid, proc, e.cred, args)
	if err != nil {
		t.Fatalf("%s xid %#x: %v", nfs3.ProcName(proc), xid, err)
	}
	return body
}

// replyStatus decodes a reply message: its accept_stat and, for
// SUCCESS, the NFS status that starts every NFSv3 result.
func replyStatus(t testing.TB, body []byte) (sunrpc.AcceptStat, nfs3.Status) {
	t.Helper()
	var d xdr.Decoder
	d.Reset(body)
	rh, err := sunrpc.DecodeReplyHeader(&d)
	if err != nil || rh.Stat != sunrpc.MsgAccepted {
		t.Fatalf("reply header %+v: %v", rh, err)
	}
	if rh.Accept != sunrpc.Success {
		return rh.Accept, 0
	}
	st := nfs3.Status(d.Uint32())
	if d.Err() != nil {
		t.Fatalf("reply without an NFS status: %v", d.Err())
	}
	return rh.Accept, st
}

func nfsStatus(t testing.TB, body []byte) nfs3.Status {
	t.Helper()
	acc, st := replyStatus(t, body)
	if acc != sunrpc.Success {
		t.Fatalf("accept_stat %v", acc)
	}
	return st
}

func (e *drcEnv) lookup(t *testing.T, name string) nfs3.FH {
	t.Helper()
	fh, st := e.n.lookup(e.dir, name)
	wantStatus(t, "LOOKUP "+name, st, nfs3.OK)
	return fh
}

// TestDRCRetransmission sends each non-idempotent procedure by raw RPC
// with a fixed XID, then again with the same XID from a new connection
// (new source port), as a client retransmits after a reconnect: the
// retransmission gets the first reply byte for byte, while a new call
// with the same arguments and another XID shows what executing it again
// would have answered (NFS3ERR_EXIST, NFS3ERR_NOENT). Over TCP and over
// RPC-over-RDMA (software iWARP; the WRITE data in Read chunks, and each
// retransmission on a new connection, as RPC-over-RDMA requesters do).
func TestDRCRetransmission(t *testing.T) {
	for _, proto := range []string{"tcp", "rdma"} {
		t.Run(proto, func(t *testing.T) { drcRetransmission(t, proto) })
	}
}

func drcRetransmission(t *testing.T, proto string) {
	e := newDRCEnv(t, proto, drcConfig{})
	dirOp := func(name string) nfs3.DirOpArgs { return nfs3.DirOpArgs{Dir: e.dir, Name: name} }
	xid := uint32(0x5eed0000)
	var hits uint64
	// step: first transmission, retransmission on a new connection, a
	// fresh call with the same arguments.
	step := func(name string, proc uint32, args func() any, fresh nfs3.Status) {
		t.Helper()
		xid++
		tr := e.dial(t)
		first := e.call(t, tr, xid, proc, args())
		wantStatus(t, name, nfsStatus(t, first), nfs3.OK)
		tr.Close() // the reply was "lost": the client reconnects and retransmits
		tr = e.dial(t)
		again := e.call(t, tr, xid, proc, args())
		if !bytes.Equal(again, first) {
			t.Fatalf("%s: the retransmission got %x, the first transmission %x", name, again, first)
		}
		hits++
		if s := e.cache.Stats(); s.Hits != hits {
			t.Fatalf("%s: %d hits, want %d (%+v)", name, s.Hits, hits, s)
		}
		if fresh != nfs3.OK {
			xid++
			wantStatus(t, name+" executed again", nfsStatus(t, e.call(t, tr, xid, proc, args())), fresh)
		}
	}

	step("MKDIR", nfs3.ProcMkdir, func() any { return &nfs3.MkdirArgs{Where: dirOp("d"), Attr: sattrMode(0o755)} }, nfs3.ErrExist)
	step("CREATE GUARDED", nfs3.ProcCreate, func() any {
		return &nfs3.CreateArgs{Where: dirOp("f"), How: nfs3.CreateHow{Mode: nfs3.Guarded, Attr: sattrMode(0o644)}}
	}, nfs3.ErrExist)
	step("SYMLINK", nfs3.ProcSymlink, func() any {
		return &nfs3.SymlinkArgs{Where: dirOp("l"), Path: []byte("target/of/the/link")}
	}, nfs3.ErrExist)
	step("MKNOD", nfs3.ProcMknod, func() any { return &nfs3.MknodArgs{Where: dirOp("p"), Type: nfs3.TypeFIFO, Attr: sattrMode(0o600)} }, nfs3.ErrExist)
	f := e.lookup(t, "f")
	step("LINK", nfs3.ProcLink, func() any { return &nfs3.LinkArgs{File: f, Link: dirOp("hl")} }, nfs3.ErrExist)
	step("RENAME", nfs3.ProcRename, func() any { return &nfs3.RenameArgs{From: dirOp("f"), To: dirOp("g")} }, nfs3.ErrNoEnt)
	step("REMOVE", nfs3.ProcRemove, func() any { return &nfs3.RemoveArgs{Object: dirOp("g")} }, nfs3.ErrNoEnt)
	step("RMDIR", nfs3.ProcRmdir, func() any { return &nfs3.RmdirArgs{Object: dirOp("d")} }, nfs3.ErrNoEnt)
	hl := e.lookup(t, "hl")
	a, st := e.n.getattr(hl)
	wantStatus(t, "GETATTR", st, nfs3.OK)
	step("SETATTR guarded", nfs3.ProcSetattr, func() any {
		return &nfs3.SetattrArgs{Object: hl, Attr: sattrMode(0o600), Guard: nfs3.SattrGuard{Check: true, Ctime: a.Ctime}}
	}, nfs3.OK)

	// A WRITE executed again would undo a later WRITE of the same range.
	tr := e.dial(t)
	w1 := func() any {
		return &nfs3.WriteArgs{File: hl, Stable: nfs3.FileSync, Data: bytes.Repeat([]byte("A"), 4096)}
	}
	first := e.call(t, tr, 0x77770001, nfs3.ProcWrite, w1())
	wantStatus(t, "WRITE A", nfsStatus(t, first), nfs3.OK)
	w2 := &nfs3.WriteArgs{File: hl, Stable: nfs3.FileSync, Data: bytes.Repeat([]byte("B"), 4096)}
	wantStatus(t, "WRITE B", nfsStatus(t, e.call(t, tr, 0x77770002, nfs3.ProcWrite, w2)), nfs3.OK)
	tr.Close()
	if again := e.call(t, e.dial(t), 0x77770001, nfs3.ProcWrite, w1()); !bytes.Equal(again, first) {
		t.Fatalf("retransmitted WRITE: %x, first %x", again, first)
	}
	got, err := os.ReadFile(filepath.Join(e.env.root, "exp", "hl"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, w2.Data) {
		t.Fatalf("the retransmitted WRITE was executed again: the file holds %.8q...", got)
	}
	if e.rdma != nil {
		m := e.rdma.Metrics()
		t.Logf("RPC-over-RDMA: %+v", m)
		if m.ReadChunks == 0 || m.Retransmits == 0 {
			t.Fatal("no Read chunk, or no retransmission seen by the responder")
		}
	}
	s := e.cache.Stats()
	t.Logf("%s: %+v", proto, s)
	if s.Hits != hits+1 || s.InProgress != 0 || s.Pending != 0 || s.Entries == 0 || s.Bytes == 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestDRCSameXIDNewCall: a call that reuses an XID with other arguments,
// another procedure or another user is a new call and is executed; the
// cached reply still answers the true retransmission.
func TestDRCSameXIDNewCall(t *testing.T) {
	e := newDRCEnv(t, "tcp", drcConfig{})
	for _, n := range []string{"a", "b", "c"} {
		testenv.MustWrite(t, filepath.Join(e.env.root, "exp", n), []byte(n))
	}
	tr := e.dial(t)
	const xid = 0xabcd
	rm := func(name string) any { return &nfs3.RemoveArgs{Object: nfs3.DirOpArgs{Dir: e.dir, Name: name}} }
	first := e.call(t, tr, xid, nfs3.ProcRemove, rm("a"))
	wantStatus(t, "REMOVE a", nfsStatus(t, first), nfs3.OK)
	// same XID, other arguments: executed
	wantStatus(t, "REMOVE b, same XID", nfsStatus(t, e.call(t, tr, xid, nfs3.ProcRemove, rm("b"))), nfs3.OK)
	if _, err := os.Stat(filepath.Join(e.env.root, "exp", "b")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("b not removed: %v", err)
	}
	// same XID and arguments, another procedure: executed
	wantStatus(t, "RMDIR a, same XID", nfsStatus(t, e.call(t, tr, xid, nfs3.ProcRmdir, rm("a"))), nfs3.ErrNoEnt)
	// same XID and arguments, another user: executed (and refused: /exp
	// is root's, mode 0755)
	cred, _ := (&sunrpc.AuthSysParams{MachineName: "drc-test", UID: 1000, GID: 1000}).Credential()
	body, err := rawCall(testenv.Context(t, 30*time.Second), tr, xid, nfs3.ProcRemove, cred, rm("a"))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "REMOVE a as uid 1000", nfsStatus(t, body), nfs3.ErrAccess)
	// a malformed call with the XID: GARBAGE_ARGS, executed, not cached
	for range 2 {
		if acc, _ := replyStatus(t, e.call(t, tr, xid, nfs3.ProcRemove, []byte{0, 0, 0, 9})); acc != sunrpc.GarbageArgs {
			t.Fatalf("truncated REMOVE: %v", acc)
		}
	}
	// and the true retransmission is still answered from the cache
	if again := e.call(t, tr, xid, nfs3.ProcRemove, rm("a")); !bytes.Equal(again, first) {
		t.Fatalf("retransmission: %x, first %x", again, first)
	}
	if s := e.cache.Stats(); s.Hits != 1 || s.Misses != 6 || s.Entries != 4 {
		t.Fatalf("stats %+v, want 1 hit, 6 misses, 4 entries", s)
	}
}

// TestDRCInProgress holds the first transmission of a REMOVE inside the
// procedure while its retransmission arrives on another connection: the
// retransmission is not executed, and once the first is done both get its
// reply.
func TestDRCInProgress(t *testing.T) {
	e := newDRCEnv(t, "tcp", drcConfig{})
	testenv.MustWrite(t, filepath.Join(e.env.root, "exp", "x"), []byte("x"))
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the server stops, which waits for its calls
	var runs atomic.Int32
	inner := e.env.srv.wrap(nfsProcs[nfs3.ProcRemove])
	procs := e.env.srv.nfsHandlersWith(e.cache)
	procs[nfs3.ProcRemove] = e.cache.wrap(nfs3.ProcRemove, func(ctx context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
		runs.Add(1)
		entered <- struct{}{}
		<-release
		return inner(ctx, req, b)
	})
	e.env.srv.rpc.Register(nfs3.Program, nfs3.Version, procs)

	args := &nfs3.RemoveArgs{Object: nfs3.DirOpArgs{Dir: e.dir, Name: "x"}}
	type result struct {
		body []byte
		err  error
	}
	send := func(tr sunrpc.ClientTransport) chan result {
		c := make(chan result, 1)
		go func() {
			body, err := rawCall(testenv.Context(t, 30*time.Second), tr, 0x1234, nfs3.ProcRemove, e.cred, args)
			c <- result{body, err}
		}()
		return c
	}
	ctx := testenv.Context(t, 30*time.Second)
	first := send(e.dial(t))
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the first REMOVE never reached the procedure")
	}
	second := send(e.dial(t))
	for e.cache.Stats().InProgress == 0 { // the retransmission reached the cache
		select {
		case <-ctx.Done():
			t.Fatalf("the retransmission never reached the cache: %+v", e.cache.Stats())
		case <-time.After(time.Millisecond):
		}
	}
	unblock()
	r1, r2 := <-first, <-second
	if r1.err != nil || r2.err != nil {
		t.Fatal(r1.err, r2.err)
	}
	wantStatus(t, "REMOVE", nfsStatus(t, r1.body), nfs3.OK)
	if !bytes.Equal(r1.body, r2.body) {
		t.Fatalf("retransmission %x, first %x", r2.body, r1.body)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("REMOVE executed %d times", n)
	}
	if s := e.cache.Stats(); s.Hits != 1 || s.InProgress != 1 || s.Misses != 1 || s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestDRCBoundAndExpiry: the cache holds at most MaxEntries replies, the
// least recently used dropped first (a hit refreshes one), and a reply
// expires Expiry after its last use (fake clock).
func TestDRCBoundAndExpiry(t *testing.T) {
	const max, expiry = 4, 10 * time.Minute
	e := newDRCEnv(t, "tcp", drcConfig{MaxEntries: max, Expiry: expiry})
	tr := e.dial(t)
	name := func(i int) string { return "f" + string(rune('a'+i)) }
	rm := func(i int) any { return &nfs3.RemoveArgs{Object: nfs3.DirOpArgs{Dir: e.dir, Name: name(i)}} }
	remove := func(i int, want nfs3.Status) {
		t.Helper()
		wantStatus(t, "REMOVE "+name(i), nfsStatus(t, e.call(t, tr, uint32(100+i), nfs3.ProcRemove, rm(i))), want)
	}
	for i := range 12 {
		testenv.MustWrite(t, filepath.Join(e.env.root, "exp", name(i)), nil)
	}
	for i := range 10 {
		remove(i, nfs3.OK)
		if s := e.cache.Stats(); s.Entries > max {
			t.Fatalf("%d entries, bound %d", s.Entries, max)
		}
	}
	if s := e.cache.Stats(); s.Entries != max || s.Evictions != 10-max {
		t.Fatalf("after 10 calls: %+v", s)
	}
	// held: 6 7 8 9 (oldest first)
	remove(6, nfs3.OK)       // hit, refreshed: 7 8 9 6
	remove(10, nfs3.OK)      // evicts 7: 8 9 6 10
	remove(7, nfs3.ErrNoEnt) // evicted: executed again; evicts 8: 9 6 10 7
	remove(6, nfs3.OK)       // still held thanks to the refresh: 9 10 7 6
	if s := e.cache.Stats(); s.Hits != 2 || s.Evictions != 10-max+2 {
		t.Fatalf("stats %+v", s)
	}
	e.clock.Advance(expiry - time.Second)
	remove(9, nfs3.OK) // still fresh: 10 7 6 9
	e.clock.Advance(time.Second)
	remove(10, nfs3.ErrNoEnt) // expired: executed again
	s := e.cache.Stats()
	if s.Hits != 3 || s.Expired == 0 || s.Entries > max {
		t.Fatalf("stats %+v", s)
	}
	// many calls: the bound holds
	for i := range 500 {
		want := nfs3.ErrNoEnt
		if i == 0 {
			want = nfs3.OK // the last file left
		}
		wantStatus(t, "REMOVE", nfsStatus(t, e.call(t, tr, uint32(1000+i), nfs3.ProcRemove, rm(11+i%2))), want)
	}
	if s := e.cache.Stats(); s.Entries != max || s.Pending != 0 {
		t.Fatalf("after 500 more calls: %+v", s)
	}
}

// TestDRCIdempotentNotCached: GETATTR and READ with a reused XID are
// executed every time and see the file's current state.
func TestDRCIdempotentNotCached(t *testing.T) {
	e := newDRCEnv(t, "tcp", drcConfig{})
	path := filepath.Join(e.env.root, "exp", "file")
	testenv.MustWrite(t, path, []byte("first"))
	fh := e.lookup(t, "file")
	tr := e.dial(t)
	getattr := func() nfs3.GetattrRes {
		var d xdr.Decoder
		d.Reset(e.call(t, tr, 0x42, nfs3.ProcGetattr, &nfs3.GetattrArgs{Object: fh}))
		if _, err := sunrpc.DecodeReplyHeader(&d); err != nil {
			t.Fatal(err)
		}
		var r nfs3.GetattrRes
		if err := r.Decode(&d); err != nil {
			t.Fatal(err)
		}
		return r
	}
	read := func() []byte {
		var d xdr.Decoder
		d.Reset(e.call(t, tr, 0x43, nfs3.ProcRead, &nfs3.ReadArgs{File: fh, Count: 100}))
		if _, err := sunrpc.DecodeReplyHeader(&d); err != nil {
			t.Fatal(err)
		}
		var r nfs3.ReadRes
		if err := r.Decode(&d, nil, false); err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(r.Data)
	}
	if a := getattr(); a.Status != nfs3.OK || a.Attr.Size != 5 {
		t.Fatalf("GETATTR %+v", a)
	}
	if d := read(); string(d) != "first" {
		t.Fatalf("READ %q", d)
	}
	testenv.MustWrite(t, path, []byte("second call"))
	if a := getattr(); a.Attr.Size != 11 {
		t.Fatalf("GETATTR with the same XID answered from a cache: size %d", a.Attr.Size)
	}
	if d := read(); string(d) != "second call" {
		t.Fatalf("READ with the same XID answered from a cache: %q", d)
	}
	if s := e.cache.Stats(); s != (DRCStats{}) {
		t.Fatalf("idempotent calls reached the cache: %+v", s)
	}
}

// drcRequest is a call as the dispatcher hands it to a handler.
func drcRequest(xid, proc uint32, args []byte, peer net.Addr, sys sunrpc.AuthSysParams) *sunrpc.Request {
	req := &sunrpc.Request{XID: xid, Vers: nfs3.Version, Proc: proc, Args: args, Peer: peer, Transport: "tcp"}
	req.Cred.Flavor = sunrpc.AuthSys
	req.Cred.Sys = sys
	return req
}

// TestDRCKey: what tells a retransmission from a new call.
func TestDRCKey(t *testing.T) {
	c := newReplyCache(drcConfig{})
	sys := sunrpc.AuthSysParams{Stamp: 1, MachineName: "node-1", UID: 1000, GID: 100}
	args := bytes.Repeat([]byte{7}, 400)
	peer := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 811}
	base := c.key(drcRequest(9, nfs3.ProcRemove, args, peer, sys))
	same := func(what string, req *sunrpc.Request, want bool) {
		t.Helper()
		if got := c.key(req) == base; got != want {
			t.Errorf("%s: same key %v, want %v", what, got, want)
		}
	}
	same("another source port (reconnect)", drcRequest(9, nfs3.ProcRemove, args, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 40000}, sys), true)
	same("IPv4-mapped IPv6 address", drcRequest(9, nfs3.ProcRemove, args, &net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.1"), Port: 1}, sys), true)
	stamp := sys
	stamp.Stamp = 2
	same("another AUTH_SYS stamp", drcRequest(9, nfs3.ProcRemove, args, peer, stamp), true)
	tail := bytes.Clone(args)
	tail[300] = 8
	same("a difference past the checksummed 256 bytes", drcRequest(9, nfs3.ProcRemove, tail, peer, sys), true)

	same("another address", drcRequest(9, nfs3.ProcRemove, args, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 811}, sys), false)
	same("another XID", drcRequest(10, nfs3.ProcRemove, args, peer, sys), false)
	same("another procedure", drcRequest(9, nfs3.ProcRmdir, args, peer, sys), false)
	head := bytes.Clone(args)
	head[255] = 8
	same("other leading arguments", drcRequest(9, nfs3.ProcRemove, head, peer, sys), false)
	same("another argument length", drcRequest(9, nfs3.ProcRemove, args[:396], peer, sys), false)
	for _, f := range []func(*sunrpc.AuthSysParams){
		func(p *sunrpc.AuthSysParams) { p.UID = 0 },
		func(p *sunrpc.AuthSysParams) { p.GID = 0 },
		func(p *sunrpc.AuthSysParams) { p.MachineName = "node-2" },
	} {
		o := sys
		f(&o)
		same("another credential "+o.MachineName, drcRequest(9, nfs3.ProcRemove, args, peer, o), false)
	}
	rdma := drcRequest(9, nfs3.ProcRemove, args, peer, sys)
	rdma.Transport = "rdma"
	same("another transport", rdma, false)
	withPayload := drcRequest(9, nfs3.ProcRemove, args[:396], peer, sys)
	withPayload.ArgPayload = []byte{1, 2, 3, 4}
	same("an argument pulled from a Read chunk", withPayload, false)
	if other := newReplyCache(drcConfig{}); other.key(drcRequest(9, nfs3.ProcRemove, args, peer, sys)).sum == base.sum {
		t.Error("two caches share a checksum seed")
	}
}

// TestDRCHandlerFailures: a call that fails at the RPC level, panics or is
// cut short leaves no entry, and a retransmission waiting for it executes
// itself; a waiting retransmission whose connection ends gets no reply.
func TestDRCHandlerFailures(t *testing.T) {
	c := newReplyCache(drcConfig{})
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	req := func() *sunrpc.Request {
		return drcRequest(5, nfs3.ProcCreate, []byte{0, 0, 0, 1}, peer, sunrpc.AuthSysParams{})
	}
	ctx := testenv.Context(t, 30*time.Second)
	failing := c.wrap(nfs3.ProcCreate, func(context.Context, *sunrpc.Request, *sunrpc.Builder) error { return sunrpc.ErrSystemErr })
	for range 2 {
		if err := failing(ctx, req(), sunrpc.NewBuilder(nil)); !errors.Is(err, sunrpc.ErrSystemErr) {
			t.Fatalf("err %v", err)
		}
	}
	panicking := c.wrap(nfs3.ProcCreate, func(context.Context, *sunrpc.Request, *sunrpc.Builder) error { panic("boom") })
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		panicking(ctx, req(), sunrpc.NewBuilder(nil))
	}()
	if s := c.Stats(); s.Misses != 3 || s.Entries != 0 || s.Pending != 0 || s.Hits != 0 {
		t.Fatalf("stats %+v", s)
	}

	// The first execution fails while a retransmission waits: the
	// retransmission executes and its reply is kept.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	var runs atomic.Int32
	h := c.wrap(nfs3.ProcCreate, func(_ context.Context, _ *sunrpc.Request, b *sunrpc.Builder) error {
		if runs.Add(1) == 1 {
			close(entered)
			<-release
			return sunrpc.ErrSystemErr
		}
		b.Uint32(77)
		return nil
	})
	firstErr := make(chan error, 1)
	go func() { firstErr <- h(ctx, req(), sunrpc.NewBuilder(nil)) }()
	<-entered
	// a waiter whose connection ends gives up without a reply
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := h(cctx, req(), sunrpc.NewBuilder(nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled waiter: %v", err)
	}
	second := make(chan []byte, 1)
	go func() {
		b := sunrpc.NewBuilder(nil)
		if err := h(ctx, req(), b); err != nil {
			t.Error(err)
		}
		second <- b.Bytes()
	}()
	for c.Stats().InProgress < 2 {
		select {
		case <-ctx.Done():
			t.Fatal("the retransmission never waited")
		case <-time.After(time.Millisecond):
		}
	}
	unblock()
	if err := <-firstErr; !errors.Is(err, sunrpc.ErrSystemErr) {
		t.Fatalf("first: %v", err)
	}
	if got := <-second; !bytes.Equal(got, []byte{0, 0, 0, 77}) {
		t.Fatalf("retransmission's reply %x", got)
	}
	b := sunrpc.NewBuilder(nil)
	if err := h(ctx, req(), b); err != nil || !bytes.Equal(b.Bytes(), []byte{0, 0, 0, 77}) || runs.Load() != 2 {
		t.Fatalf("cached reply %x, %v, %d runs", b.Bytes(), err, runs.Load())
	}
	if s := c.Stats(); s.Entries != 1 || s.Hits != 1 || s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// FuzzReplyCache drives the cache with a sequence of calls (a few XIDs,
// argument variants and failures) and clock steps, and checks each answer
// against a model: a list of replies in least-recently-used order with the
// expiry and bound of replyCache. Executions reply with their sequence
// number, so a replay shows which execution it came from.
func FuzzReplyCache(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 3, 0, 7, 4, 0})
	f.Add([]byte{0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 255, 0, 32, 32})
	f.Add([]byte{1, 5, 9, 13, 17, 21, 1, 5, 63, 63, 1})
	f.Fuzz(checkReplyCacheOps)
}

// checkReplyCacheOps is FuzzReplyCache's property.
func checkReplyCacheOps(t *testing.T, ops []byte) {
	const max, expiry = 3, 8 * time.Minute
	clock := &drcClock{t: time.Unix(0, 0)}
	c := newReplyCache(drcConfig{MaxEntries: max, Expiry: expiry, Now: clock.Now})
	type held struct {
		k     [2]byte
		reply uint32
		at    time.Time
	}
	var model []held // newest first
	var execs uint32
	peer := &net.TCPAddr{IP: net.IPv4(10, 1, 1, 1), Port: 700}
	for _, op := range ops {
		if op&7 == 7 { // clock step of 0..31 minutes
			clock.Advance(time.Duration(op>>3) * time.Minute)
			continue
		}
		k := [2]byte{op & 3, (op >> 2) & 3} // XID, argument variant
		fail := op&0x40 != 0
		req := drcRequest(uint32(k[0]), nfs3.ProcWrite, []byte{0, 0, 0, k[1]}, peer, sunrpc.AuthSysParams{MachineName: "m"})
		ran := false
		h := c.wrap(nfs3.ProcWrite, func(_ context.Context, _ *sunrpc.Request, b *sunrpc.Builder) error {
			ran = true
			execs++
			if fail {
				return sunrpc.ErrSystemErr
			}
			b.Uint32(execs)
			return nil
		})
		b := sunrpc.NewBuilder(nil)
		b.Uint32(0xfeedface) // the dispatcher's reply header
		err := h(context.Background(), req, b)

		now := clock.Now()
		i := 0
		for i < len(model) && model[i].k != k {
			i++
		}
		if i < len(model) && now.Sub(model[i].at) >= expiry {
			model = append(model[:i], model[i+1:]...)
			i = len(model)
		}
		if i < len(model) { // hit
			hit := model[i]
			hit.at = now
			model = append([]held{hit}, append(model[:i:i], model[i+1:]...)...)
			if ran || err != nil || !bytes.Equal(b.Bytes(), binary.BigEndian.AppendUint32([]byte{0xfe, 0xed, 0xfa, 0xce}, hit.reply)) {
				t.Fatalf("op %#x: want the reply of execution %d, got ran %v err %v reply %x", op, hit.reply, ran, err, b.Bytes())
			}
		} else {
			if !ran {
				t.Fatalf("op %#x: not executed (reply %x)", op, b.Bytes())
			}
			if fail {
				if err == nil {
					t.Fatalf("op %#x: failure lost", op)
				}
			} else {
				model = append([]held{{k, execs, now}}, model...)
				for len(model) > 0 {
					last := model[len(model)-1]
					if now.Sub(last.at) < expiry && len(model) <= max {
						break
					}
					model = model[:len(model)-1]
				}
			}
		}
		s := c.Stats()
		if s.Entries != len(model) || s.Bytes != 4*len(model) || s.Pending != 0 || s.Entries > max {
			t.Fatalf("op %#x: stats %+v, model holds %d", op, s, len(model))
		}
	}
}

// BenchmarkReplyCache measures what the cache adds to a WRITE-sized call:
// "bare" is the handler alone (the baseline), "miss" a new call each time
// with the cache full (an eviction per call), "hit" a retransmission
// answered from the cache. Compare the rows, and allocs/op (0 expected).
func BenchmarkReplyCache(b *testing.B) {
	reply := make([]byte, 136) // a WRITE3resok: wcc_data, count, committed, verifier
	h := func(_ context.Context, _ *sunrpc.Request, bd *sunrpc.Builder) error {
		bd.Fixed(reply)
		return nil
	}
	args := make([]byte, 512)
	peer := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 900}
	run := func(b *testing.B, hd sunrpc.Handler, xid func(i int) uint32) {
		req := drcRequest(0, nfs3.ProcWrite, args, peer, sunrpc.AuthSysParams{MachineName: "node-1", UID: 1000, GID: 1000})
		bd := sunrpc.NewBuilder(make([]byte, 0, 512))
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			req.XID = xid(i)
			bd.Reset(bd.Bytes())
			if err := hd(ctx, req, bd); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, h, func(i int) uint32 { return uint32(i) }) })
	b.Run("miss", func(b *testing.B) {
		c := newReplyCache(drcConfig{MaxEntries: 1024})
		hd := c.wrap(nfs3.ProcWrite, h)
		run(b, hd, func(i int) uint32 { return uint32(i) })
	})
	b.Run("hit", func(b *testing.B) {
		c := newReplyCache(drcConfig{})
		hd := c.wrap(nfs3.ProcWrite, h)
		run(b, hd, func(int) uint32 { return 7 })
	})
}
