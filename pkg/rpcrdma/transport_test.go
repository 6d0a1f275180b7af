package rpcrdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// TestMain fails the run if goroutines started by the tests outlive them.
func TestMain(m *testing.M) { testenv.MainCheckingLeaks(m) }

const (
	tProg       = 0x20000077
	tVers       = 1
	pEcho       = 1 // opaque args -> same opaque, inline
	pEchoDDP    = 2 // DDP-eligible argument -> same bytes as a DDP-eligible result
	pGive       = 3 // uint32 n -> n bytes as a DDP-eligible result
	pLong       = 4 // uint32 n -> n bytes as a non-DDP opaque
	pCount      = 5 // counts calls in progress
	pEchoToLong = 6 // DDP-eligible argument -> same bytes, non-DDP opaque
	pSink       = 7 // DDP-eligible argument -> its length (uint32)
)

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed + i>>8)
	}
	return b
}

// givePattern is pattern(4 MiB, 3), made once: pGive answers with a prefix
// of it (pattern(n, 3) is a prefix of pattern(m, 3) for n <= m), so that
// benchmarks measure the transport, not the filling of a buffer.
var givePattern = pattern(4<<20, 3)

type testSrv struct {
	srv               *Server
	rpc               *sunrpc.Server
	inflight, maxSeen atomic.Int64
	calls             atomic.Int64
	delay             atomic.Int64 // pCount's sleep, ns
	delayOnce         atomic.Bool  // pCount sleeps only once
	cancel            context.CancelFunc
	done              chan error
}

func (ts *testSrv) handlers() []sunrpc.Handler {
	return []sunrpc.Handler{
		pEcho: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			d := req.ArgsDecoder()
			b := d.Opaque(4 << 20)
			if d.Err() != nil {
				return d.Err()
			}
			res.Opaque(b)
			res.Uint32(0xcafe)
			return nil
		},
		pEchoDDP: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			d := req.ArgsDecoder()
			d.Opaque(8192) // padding that pushes small payloads into a Read chunk
			b := req.Payload(d, 4<<20)
			tail := d.Uint32()
			if d.Err() != nil {
				return d.Err()
			}
			res.Payload(append([]byte(nil), b...))
			res.Uint32(tail)
			return nil
		},
		pGive: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			d := req.ArgsDecoder()
			n := d.Uint32()
			if d.Err() != nil || n > 4<<20 {
				return sunrpc.ErrGarbageArgs
			}
			res.Payload(givePattern[:n])
			res.Uint32(0xbeef)
			return nil
		},
		pLong: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			d := req.ArgsDecoder()
			n := d.Uint32()
			if d.Err() != nil || n > 4<<20 {
				return sunrpc.ErrGarbageArgs
			}
			res.Opaque(pattern(int(n), 5))
			return nil
		},
		pCount: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			n := ts.inflight.Add(1)
			for {
				m := ts.maxSeen.Load()
				if n <= m || ts.maxSeen.CompareAndSwap(m, n) {
					break
				}
			}
			ts.calls.Add(1)
			if d := ts.delay.Load(); d > 0 {
				if ts.delayOnce.Load() {
					ts.delay.Store(0)
				}
				time.Sleep(time.Duration(d))
			}
			ts.inflight.Add(-1)
			return nil
		},
		pSink: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			d := req.ArgsDecoder()
			vec := req.PayloadVec(d, 4<<20) // as the NFS server's WRITE: pieces, not joined
			if d.Err() != nil {
				return d.Err()
			}
			n := 0
			for _, p := range vec {
				n += len(p)
			}
			res.Uint32(uint32(n))
			return nil
		},
		pEchoToLong: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			d := req.ArgsDecoder()
			b := req.Payload(d, 4<<20)
			if d.Err() != nil {
				return d.Err()
			}
			res.Opaque(b)
			return nil
		},
	}
}

func newDev() *siw.Device { return siw.NewDevice(siw.Config{RTRDelay: -1}) }

// pinVersion, when not 0, is the MaxVersion startServer and newClient
// give options that name none (forVersions sets it).
var pinVersion int

// dialOne dials one connection to ts with opts (Dial, so that the test
// can reach the transport's own state) and returns it with a sunrpc
// client over it alone; both are closed at the end of t.
func dialOne(ctx context.Context, t testing.TB, ts *testSrv, opts ClientOptions) (*Client, *sunrpc.Client) {
	t.Helper()
	tr, err := Dial(ctx, newDev(), ts.srv.Addr().String(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	c, err := sunrpc.NewClient(func(context.Context) (sunrpc.ClientTransport, error) { return tr, nil }, sunrpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return tr, c
}

// forVersions runs f as subtests "v1" (both ends pinned to version 1) and
// "v2" (the default: version 2 negotiated).
func forVersions(t *testing.T, f func(t *testing.T)) {
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			pinVersion = v
			defer func() { pinVersion = 0 }()
			f(t)
		})
	}
}

func startServer(t testing.TB, opts ServerOptions) *testSrv {
	t.Helper()
	if opts.MaxVersion == 0 {
		opts.MaxVersion = pinVersion
	}
	ts := &testSrv{done: make(chan error, 1)}
	ts.rpc = sunrpc.NewServer(nil)
	ts.rpc.Register(tProg, tVers, ts.handlers())
	var err error
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	ts.srv, err = Listen(context.Background(), newDev(), "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	var ctx context.Context
	ctx, ts.cancel = context.WithCancel(context.Background())
	go func() { ts.done <- ts.srv.Serve(ctx, ts.rpc) }()
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testSrv) stop() {
	if ts.cancel != nil {
		ts.cancel()
		<-ts.done
		ts.cancel = nil
	}
}

func newClient(t testing.TB, ts *testSrv, opts ClientOptions) (*sunrpc.Client, *ClientMetrics) {
	t.Helper()
	if opts.Metrics == nil {
		opts.Metrics = &ClientMetrics{}
	}
	if opts.MaxVersion == 0 {
		opts.MaxVersion = pinVersion
	}
	c, err := sunrpc.NewClient(Dialer(newDev(), ts.srv.Addr().String(), opts), sunrpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, opts.Metrics
}

func tctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var prefix = make([]byte, 4000)

// prefixLen is the inline padding before a DDP-eligible argument of n
// bytes that makes the call exceed the 4096-byte inline threshold while
// the reduced call still fits with a Read chunk and a Write chunk in the
// header (planCall moves an argument only when that is what makes the call
// fit, so the smallest Read chunk is 25 bytes).
func prefixLen(n int) int {
	if n >= 4096 {
		return 0
	}
	return 3968
}

// call makes one call of the test program: arg (DDP-eligible when ddpArg)
// or n, and returns the result bytes and whether they were placed.
func call(ctx context.Context, c *sunrpc.Client, proc uint32, arg []byte, ddpArg bool, n uint32, resBuf []byte, maxReply int) (res []byte, placed int, err error) {
	err = c.Call(ctx, sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: proc,
		Args: func(b *sunrpc.Builder) {
			switch {
			case arg == nil:
				b.Uint32(n)
			case ddpArg && proc == pEchoDDP:
				b.Opaque(prefix[:prefixLen(len(arg))])
				b.Payload(arg)
				b.Uint32(0x7a11)
			case ddpArg:
				b.Payload(arg)
				b.Uint32(0x7a11)
			default:
				b.Opaque(arg)
			}
		},
		Results: func(d *xdr.Decoder, pl int) error {
			placed = pl
			if pl >= 0 {
				l := d.Uint32()
				if int(l) != pl {
					return fmt.Errorf("length word %d, placed %d", l, pl)
				}
				res = append([]byte(nil), resBuf[:pl]...)
			} else {
				res = append([]byte(nil), d.Opaque(8<<20)...)
			}
			return d.Err()
		},
		ReplyPayload: resBuf, MaxReplySize: maxReply})
	return res, placed, err
}

func TestChunkTypes(t *testing.T) { forVersions(t, testChunkTypes) }

func testChunkTypes(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 8})
	c, cm := newClient(t, ts, ClientOptions{Credits: 8})
	ctx := tctx(t, 30*time.Second)
	type tc struct {
		name     string
		proc     uint32
		arg      int // -1: none (send n)
		ddpArg   bool
		n        uint32
		resBuf   int // -1: no ReplyPayload
		maxReply int
		wantPl   bool
		want     func() []byte
	}
	var cases []tc
	for _, n := range []int{0, 1, 3, 4, 100, 1000} {
		cases = append(cases, tc{name: fmt.Sprintf("inline/%d", n), proc: pEcho, arg: n, resBuf: -1, maxReply: 2048})
	}
	for _, n := range []int{1, 3, 25, 27, 101, 4093, 4096, 70001, 1<<20 - 3, 1 << 20} {
		// Small results come back inline (planCall, as Linux).
		cases = append(cases, tc{name: fmt.Sprintf("read+write/%d", n), proc: pEchoDDP, arg: n, ddpArg: true, resBuf: n, maxReply: 512, wantPl: n > 3500})
	}
	for _, n := range []int{1, 3, 4093, 1 << 20} {
		cases = append(cases, tc{name: fmt.Sprintf("read+replychunk/%d", n), proc: pEchoToLong, arg: n, ddpArg: true, resBuf: -1, maxReply: n + 64})
	}
	for _, n := range []int{5000, 9999, 200003} {
		cases = append(cases, tc{name: fmt.Sprintf("poszero+replychunk/%d", n), proc: pEcho, arg: n, resBuf: -1, maxReply: n + 64})
	}
	for _, n := range []int{1, 3, 4093, 5001, 1<<20 - 1, 1 << 20} {
		cases = append(cases, tc{name: fmt.Sprintf("write/%d", n), proc: pGive, arg: -1, n: uint32(n), resBuf: n + 5, maxReply: 512, wantPl: n > 3500,
			want: func() []byte { return pattern(n, 3) }})
	}
	for _, n := range []int{3000, 5000, 60001} {
		cases = append(cases, tc{name: fmt.Sprintf("replychunk/%d", n), proc: pLong, arg: -1, n: uint32(n), resBuf: -1, maxReply: 0,
			want: func() []byte { return pattern(n, 5) }})
	}
	// A DDP-eligible result that fits inline comes inline despite a buffer.
	cases = append(cases, tc{name: "ddp-result-inline", proc: pGive, arg: -1, n: 10, resBuf: 10, maxReply: 256,
		want: func() []byte { return pattern(10, 3) }})
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			var arg []byte
			if k.arg >= 0 {
				arg = pattern(k.arg, 1)
			}
			var rb []byte
			if k.resBuf >= 0 {
				rb = make([]byte, k.resBuf)
			}
			got, placed, err := call(ctx, c, k.proc, arg, k.ddpArg, k.n, rb, k.maxReply)
			if err != nil {
				t.Fatal(err)
			}
			want := arg
			if k.want != nil {
				want = k.want()
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("got %d bytes, want %d (equal prefix? %v)", len(got), len(want), len(got) > 0 && len(want) > 0 && got[0] == want[0])
			}
			if (placed >= 0) != k.wantPl {
				t.Fatalf("placed %d, want placed=%v", placed, k.wantPl)
			}
		})
	}
	cli, srv := cm.Metrics(), ts.srv.Metrics()
	t.Logf("client %+v", cli)
	t.Logf("server %+v", srv)
	if cli.ReadChunks == 0 || cli.PositionZeroChunks == 0 || cli.WriteChunks == 0 || cli.ReplyChunks == 0 {
		t.Fatalf("not every chunk type used: %+v", cli)
	}
	if srv.ReadChunks != cli.ReadChunks || srv.PositionZeroChunks != cli.PositionZeroChunks || srv.WriteChunks != cli.WriteChunks || srv.ReplyChunks != cli.ReplyChunks {
		t.Fatalf("client and server disagree on chunks:\n%+v\n%+v", cli, srv)
	}
	if cli.Registrations != 0 || cli.CreditsInUse != 0 {
		t.Fatalf("registrations or credits left after the calls: %+v", cli)
	}
	if srv.SendWithInvalidate == 0 {
		t.Fatal("no Send With Invalidate used")
	}
}

func TestCreditExhaustion(t *testing.T) { forVersions(t, testCreditExhaustion) }

func testCreditExhaustion(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 8, Grant: 4})
	ts.delay.Store(int64(200 * time.Microsecond))
	c, cm := newClient(t, ts, ClientOptions{Credits: 32})
	ctx := tctx(t, 30*time.Second)
	run := func(n int) {
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.Call(ctx, sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pCount, MaxReplySize: 256}); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	run(1000)
	if m := ts.maxSeen.Load(); m > 4 || m < 2 {
		t.Fatalf("%d calls in progress at once with a grant of 4", m)
	}
	if ts.calls.Load() != 1000 {
		t.Fatalf("%d calls served", ts.calls.Load())
	}
	// Lower the grant: once a reply carried it, at most 2 outstanding.
	ts.srv.SetGrant(2)
	if err := c.Null(ctx, tProg, tVers); err != nil {
		t.Fatal(err)
	}
	ts.maxSeen.Store(0)
	run(200)
	if m := ts.maxSeen.Load(); m > 2 {
		t.Fatalf("%d calls in progress at once with a grant of 2", m)
	}
	// Raise it above the server's receives: clamped to Credits (8).
	ts.srv.SetGrant(100)
	if err := c.Null(ctx, tProg, tVers); err != nil {
		t.Fatal(err)
	}
	ts.maxSeen.Store(0)
	run(200)
	if m := ts.maxSeen.Load(); m > 8 || m <= 2 {
		t.Fatalf("%d calls in progress at once with a grant of 8", m)
	}
	if m := cm.Metrics(); m.CreditsInUse != 0 || m.CreditsGranted != 8 {
		t.Fatalf("client metrics %+v", m)
	}
}

// TestRequesterErrChunk: version 1's ERR_CHUNK, a version 1 requester
// against a server that also serves version 2.
func TestRequesterErrChunk(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	c, cm := newClient(t, ts, ClientOptions{MaxVersion: 1})
	ctx := tctx(t, 10*time.Second)
	// 100000 bytes of result into a 5000-byte Write chunk: ERR_CHUNK.
	_, _, err := call(ctx, c, pGive, nil, false, 100000, make([]byte, 5000), 256)
	var er *ErrorReply
	if !errors.As(err, &er) || !errors.Is(err, ErrChunk) || er.Code != ErrcodeChunk {
		t.Fatalf("error %v, want an ERR_CHUNK ErrorReply", err)
	}
	// A reply larger than MaxReplySize and inline: ERR_CHUNK too.
	if _, _, err = call(ctx, c, pLong, nil, false, 8000, nil, 100); !errors.Is(err, ErrChunk) {
		t.Fatalf("error %v, want ERR_CHUNK", err)
	}
	// The connection stays usable.
	if got, _, err := call(ctx, c, pEcho, []byte("ok"), false, 0, nil, 256); err != nil || string(got) != "ok" {
		t.Fatal(got, err)
	}
	if m := cm.Metrics(); m.ErrChunk != 2 || m.Registrations != 0 || m.CreditsInUse != 0 {
		t.Fatalf("client metrics %+v", m)
	}
	if m := ts.srv.Metrics(); m.ErrChunk != 2 {
		t.Fatalf("server metrics %+v", m)
	}
}

// rawPeer is a bare verbs requester for sending bad headers.
type rawPeer struct {
	qp     verbs.QP
	cq     verbs.CQ
	rb, sb verbs.MR
}

func dialRaw(t *testing.T, addr string) *rawPeer {
	d := newDev()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	qp, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, MaxRecvWR: 4})
	if err != nil {
		t.Fatal(err)
	}
	rp := &rawPeer{qp: qp, cq: cq}
	rp.rb, _ = pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	rp.sb, _ = pd.RegMR(make([]byte, 4096), 0)
	if err := qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rp.rb.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	pdata, _ := defaultPrivateData().Append(nil)
	if _, err := d.Connect(tctx(t, 10*time.Second), addr, qp, verbs.ConnParam{PrivateData: pdata, ResponderResources: 4}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close(); cq.Close() })
	return rp
}

// exchange sends msg and returns the reply (reposting the receive).
func (rp *rawPeer) exchange(t *testing.T, msg []byte) []byte {
	t.Helper()
	copy(rp.sb.Bytes(), msg)
	if err := rp.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{rp.sb.SGE(0, len(msg))}}); err != nil {
		t.Fatal(err)
	}
	ctx := tctx(t, 5*time.Second)
	var wc [1]verbs.WC
	for rp.cq.Poll(wc[:]) == 0 {
		if err := rp.cq.Wait(ctx); err != nil {
			t.Fatal("no reply:", err)
		}
	}
	if wc[0].Status != verbs.WCSuccess {
		t.Fatalf("%+v", wc[0])
	}
	out := append([]byte(nil), rp.rb.Bytes()[:wc[0].ByteLen]...)
	rp.qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rp.rb.SGE(0, 4096)}})
	return out
}

func TestResponderErrors(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 4, MaxVersion: 1})
	rp := dialRaw(t, ts.srv.Addr().String())
	u32 := func(v ...uint32) []byte {
		var b []byte
		for _, x := range v {
			b = be.AppendUint32(b, x)
		}
		return b
	}
	nullCall := func(xid uint32) []byte { return u32(xid, 0, 2, tProg, tVers, 0, 0, 0, 0, 0) }
	// rdma_vers 2: ERR_VERS, low = high = 1 (RFC 8166 section 4.5.1).
	got := rp.exchange(t, append(u32(0x1111, 2, 4, 0, 0, 0, 0), nullCall(0x1111)...))
	if want := u32(0x1111, 2, 4, uint32(ProcError), uint32(ErrcodeVers), 1, 1); !bytes.Equal(got, want) {
		t.Fatalf("ERR_VERS reply % x, want % x", got, want)
	}
	// A Write list with an absurd segment count: ERR_CHUNK.
	got = rp.exchange(t, append(u32(0x2222, 1, 4, 0, 0, 1, 0xffffffff), make([]byte, 64)...))
	if want := u32(0x2222, 1, 4, uint32(ProcError), uint32(ErrcodeChunk)); !bytes.Equal(got, want) {
		t.Fatalf("ERR_CHUNK reply % x, want % x", got, want)
	}
	// A Read chunk of 1 GiB: refused with ERR_CHUNK before any RDMA Read.
	got = rp.exchange(t, append(u32(0x3333, 1, 4, 1, 1, 0, 0xdead, 1<<30, 0, 0, 0, 0, 0), nullCall(0x3333)...))
	if want := u32(0x3333, 1, 4, uint32(ProcError), uint32(ErrcodeChunk)); !bytes.Equal(got, want) {
		t.Fatalf("ERR_CHUNK reply % x, want % x", got, want)
	}
	// rdma_xid differing from the RPC XID: ERR_CHUNK.
	got = rp.exchange(t, append(u32(0x4444, 1, 4, 0, 0, 0, 0), nullCall(0x4445)...))
	if want := u32(0x4444, 1, 4, uint32(ProcError), uint32(ErrcodeChunk)); !bytes.Equal(got, want) {
		t.Fatalf("ERR_CHUNK reply % x, want % x", got, want)
	}
	// And a good call still works.
	got = rp.exchange(t, append(u32(0x5555, 1, 4, 0, 0, 0, 0), nullCall(0x5555)...))
	var h Header
	if n, err := h.Decode(got, nil); err != nil || h.Proc != ProcMsg || h.Credits != 4 || be.Uint32(got[n:]) != 0x5555 {
		t.Fatalf("reply %+v %v", h, err)
	}
	if m := ts.srv.Metrics(); m.ErrVers != 1 || m.ErrChunk != 3 || m.ReadChunkBytes != 0 {
		t.Fatalf("server metrics %+v", m)
	}
}

func TestReconnect(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 8})
	px := testenv.NewProxy(t, ts.srv.Addr().String(), nil) // Kill cuts the connections, as a network failure or a server restart would
	cm := &ClientMetrics{}
	c, err := sunrpc.NewClient(Dialer(newDev(), px.Addr(), ClientOptions{Credits: 8, Metrics: cm}), sunrpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := tctx(t, 30*time.Second)
	var wg sync.WaitGroup
	var ok atomic.Int64
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				n := 1 + (g*1237+i*4099)%20000
				arg := pattern(n, g+i)
				got, _, err := call(ctx, c, pEchoDDP, arg, true, 0, make([]byte, n), 256)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, arg) {
					errs <- fmt.Errorf("call %d/%d: wrong data", g, i)
					return
				}
				ok.Add(1)
			}
		}()
	}
	// Cut the connections three times while calls are under way: after a
	// quarter, half and three quarters of them are done, whatever the
	// speed of the host.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for _, at := range []int64{120, 240, 360} {
		for ok.Load() < at {
			select {
			case <-done: // the calls ended early (an error): nothing to wait for
			case <-time.After(100 * time.Microsecond):
				continue
			}
			break
		}
		px.Kill()
	}
	<-done
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := c.Stats()
	t.Logf("client stats %+v; server %+v", st, ts.srv.Metrics())
	if sm := ts.srv.Metrics(); sm.WriteChunks == 0 || sm.ReadChunks == 0 {
		t.Fatalf("load without Read or Write chunks: %+v", sm)
	}
	if ok.Load() != 480 || st.Reconnects == 0 {
		t.Fatalf("%d calls ok, %d reconnects", ok.Load(), st.Reconnects)
	}
	c.Close()
	ts.stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, sm := cm.Metrics(), ts.srv.Metrics()
		if m.Registrations == 0 && m.RegisteredBytes == 0 && m.CreditsInUse == 0 && m.Connections == 0 &&
			sm.RegisteredBytes == 0 && sm.Connections == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resources left: client %+v server %+v", m, sm)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAbandonedCall: a caller whose ctx ends gets its error; its credit
// comes back with the late reply; nothing stays registered.
func TestAbandonedCall(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 2})
	ts.delay.Store(int64(50 * time.Millisecond))
	c, cm := newClient(t, ts, ClientOptions{Credits: 2})
	ctx := tctx(t, 10*time.Second)
	if err := c.Null(ctx, tProg, tVers); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	err := c.Call(short, sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pCount})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	for range 4 {
		if err := c.Null(ctx, tProg, tVers); err != nil {
			t.Fatal(err)
		}
	}
	if m := cm.Metrics(); m.CreditsInUse != 0 || m.Registrations != 0 {
		t.Fatalf("%+v", m)
	}
}

// --- benchmarks: RDMA vs sunrpc's TCP transport in one run ---

func benchClients(b testing.TB, credits int) (rdma, tcp *sunrpc.Client) {
	rdma, tcp, _, _ = clientPair(b, credits)
	return rdma, tcp
}

// clientPair starts a test server answering over RDMA and over sunrpc's
// TCP transport, and returns a client of each, the server and the RDMA
// client's metrics.
func clientPair(b testing.TB, credits int) (rdma, tcp *sunrpc.Client, ts *testSrv, cm *ClientMetrics) {
	ts = startServer(b, ServerOptions{Credits: credits})
	rdma, cm = newClient(b, ts, ClientOptions{Credits: credits})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sunrpc.ServeTCP(ctx, l, ts.rpc, sunrpc.TCPOptions{}); close(done) }()
	b.Cleanup(func() { cancel(); l.Close(); <-done })
	tcp, err = sunrpc.NewClient(sunrpc.TCPDialer(l.Addr().String(), sunrpc.TCPOptions{}), sunrpc.ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tcp.Close() })
	return rdma, tcp, ts, cm
}

func BenchmarkNull(b *testing.B) {
	for _, out := range []int{1, 16, 128} {
		rdma, tcp := benchClients(b, max(out, 32))
		for _, tr := range []struct {
			name string
			c    *sunrpc.Client
		}{{"rdma", rdma}, {"tcp", tcp}} {
			b.Run(fmt.Sprintf("%s/outstanding=%d", tr.name, out), func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				var next atomic.Int64
				var wg sync.WaitGroup
				for range out {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for next.Add(1) <= int64(b.N) {
							if err := tr.c.Null(ctx, tProg, tVers); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}

// BenchmarkRead1MiB: a 1 MiB DDP-eligible result (as NFS READ data) into
// the caller's buffer: over RDMA placed by the responder's RDMA Write into a
// Write chunk; over TCP read inline and copied into the buffer, as a
// consumer (the NFS client) must. One call at a time, and 8 outstanding.
func BenchmarkRead1MiB(b *testing.B) {
	rdma, tcp := benchClients(b, 32)
	const n = 1 << 20
	for _, tr := range []struct {
		name string
		c    *sunrpc.Client
	}{{"rdma-writechunk", rdma}, {"tcp", tcp}} {
		for _, depth := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/outstanding=%d", tr.name, depth), func(b *testing.B) {
				ctx := context.Background()
				b.SetBytes(n)
				b.ReportAllocs()
				b.SetParallelism(depth)
				var failed atomic.Value
				b.RunParallel(func(pb *testing.PB) {
					buf := make([]byte, n)
					// Made once per goroutine, not per call: a closure
					// capturing buf, built in the loop, would be the
					// benchmark's own allocation in every call.
					spec := read1MiBSpec(buf)
					for pb.Next() {
						err := tr.c.Call(ctx, spec)
						if err != nil {
							failed.Store(err)
							return
						}
					}
				})
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// read1MiBSpec is the call of BenchmarkRead1MiB and TestNoAllocsPerCall:
// pGive of len(buf) bytes, the result placed into buf (a Write chunk over
// RDMA) or, inline, copied into it.
func read1MiBSpec(buf []byte) sunrpc.CallSpec {
	n := len(buf)
	return sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pGive,
		Args: func(e *sunrpc.Builder) { e.Uint32(uint32(n)) },
		Results: func(d *xdr.Decoder, placed int) error {
			if placed < 0 { // inline: copy into the caller's buffer
				copy(buf, d.Opaque(n))
			}
			return d.Err()
		},
		ReplyPayload: buf, MaxReplySize: 256}
}

// TestKeepAlive: a responder that stops answering NULL calls is detected
// by the idle keepalive, and the connection is failed (Done closes).
func TestKeepAlive(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 4})
	const slowProg = 0x20000078
	var slow atomic.Bool
	ts.rpc.Register(slowProg, 1, []sunrpc.Handler{func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		if slow.Load() {
			time.Sleep(300 * time.Millisecond)
		}
		return nil
	}})
	ctx := tctx(t, 10*time.Second)
	c, err := Dial(ctx, newDev(), ts.srv.Addr().String(), ClientOptions{Credits: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kdone := make(chan struct{})
	go func() { c.KeepAlive(ctx, slowProg, 1, 20*time.Millisecond, 100*time.Millisecond); close(kdone) }()
	time.Sleep(150 * time.Millisecond)
	select {
	case <-c.Done():
		t.Fatal("connection failed while the peer answered")
	default:
	}
	slow.Store(true)
	select {
	case <-c.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("keepalive did not detect the silent peer")
	}
	<-kdone
	if _, err := c.RoundTrip(ctx, &sunrpc.Call{XID: 1, Msg: sunrpc.Message{Head: make([]byte, 40)}}); !errors.Is(err, sunrpc.ErrConnLost) {
		t.Fatalf("RoundTrip after keepalive failure: %v", err)
	}
}

// TestRetransmitSameConnection: sunrpc's per-try Timeout retransmits with
// the same XID; as Linux xprtrdma, the transport then disconnects and the
// call is retransmitted on a new connection, and completes.
func TestRetransmitSameConnection(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 4})
	ts.delay.Store(int64(100 * time.Millisecond))
	ts.delayOnce.Store(true)
	cm := &ClientMetrics{}
	c, err := sunrpc.NewClient(Dialer(newDev(), ts.srv.Addr().String(), ClientOptions{Credits: 4, Metrics: cm, Logger: testLogger(t)}),
		sunrpc.ClientOptions{Retry: sunrpc.RetryPolicy{Timeout: 60 * time.Millisecond, Soft: true, Retries: 50}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := tctx(t, 10*time.Second)
	if err := c.Null(ctx, tProg, tVers); err != nil { // the grant opens the window to 4
		t.Fatal(err)
	}
	if err := c.Call(ctx, sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pCount}); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Retransmits == 0 || st.Reconnects == 0 {
		t.Fatalf("client stats %+v", st)
	}
	if m, sm := cm.Metrics(), ts.srv.Metrics(); m.UnmatchedReplies != 0 || m.BadReplies != 0 || m.Replies != 2 || m.CreditsInUse != 0 || sm.Retransmits == 0 {
		t.Fatalf("client %+v server %+v", m, sm)
	}
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("RPCRDMA_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestManyOutstanding: many callers and fast replies, every call offering
// a Reply chunk (MaxReplySize 0) answered inline with Send With
// Invalidate: receive and send buffers cycle quickly through the slots.
func TestManyOutstanding(t *testing.T) { forVersions(t, testManyOutstanding) }

func testManyOutstanding(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 128})
	c, cm := newClient(t, ts, ClientOptions{Credits: 128})
	ctx := tctx(t, 20*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 256)
	for range 256 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 16 {
				if err := c.Null(ctx, tProg, tVers); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := cm.Metrics(); m.Replies != 4096 || m.CreditsInUse != 0 || m.BadReplies != 0 || m.SendWithInvalidate != 4096 || m.Connections != 1 {
		t.Fatalf("%+v", m)
	}
}
