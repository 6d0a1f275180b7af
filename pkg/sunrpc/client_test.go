package sunrpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Every accept_stat and reject_stat a server can produce, through a real
// TCP client and server.
func TestCallStatuses(t *testing.T) {
	addr, _ := serveTCP(t, newTestServer(), TCPOptions{})
	c := newTestClient(t, addr, ClientOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	tests := []struct {
		name             string
		prog, vers, proc uint32
		want             error
		low, high        uint32
		auth             AuthStat
		args             func(b *Builder)
	}{
		{name: "NULL", prog: testProg, vers: 2, proc: 0},
		{name: "NULL other version", prog: testProg, vers: 3, proc: 0},
		{name: "unknown program", prog: 12345, vers: 1, proc: 0, want: ErrProgUnavail},
		{name: "unknown version", prog: testProg, vers: 9, proc: 0, want: ErrProgMismatch, low: 2, high: 3},
		{name: "unknown procedure", prog: testProg, vers: 3, proc: 99, want: ErrProcUnavail},
		{name: "nil procedure", prog: testProg, vers: 3, proc: 0x7fffffff, want: ErrProcUnavail},
		{name: "garbage arguments", prog: testProg, vers: 3, proc: procGarbage, want: ErrGarbageArgs},
		{name: "echo without its argument", prog: testProg, vers: 3, proc: procEcho, want: ErrGarbageArgs},
		{name: "echo argument too long", prog: testProg, vers: 3, proc: procEcho, want: ErrGarbageArgs,
			args: func(b *Builder) { b.Uint32(1<<20 + 1) }},
		{name: "handler error", prog: testProg, vers: 3, proc: procFail, want: ErrSystemErr},
		{name: "handler panic", prog: testProg, vers: 3, proc: procPanic, want: ErrSystemErr},
		{name: "handler denies", prog: testProg, vers: 3, proc: procDeny, want: ErrAuth, auth: AuthTooWeak},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Call(ctx, CallSpec{Prog: tt.prog, Vers: tt.vers, Proc: tt.proc, Args: tt.args})
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var me *MismatchError
			if errors.As(err, &me) != (tt.high != 0) || (me != nil && (me.Low != tt.low || me.High != tt.high)) {
				t.Fatalf("err = %v, want range %d..%d", err, tt.low, tt.high)
			}
			var ae *AuthError
			if errors.As(err, &ae) != (tt.auth != 0) || (ae != nil && ae.Stat != tt.auth) {
				t.Fatalf("err = %v, want %v", err, tt.auth)
			}
		})
	}
	if s := c.Stats(); s.Calls != uint64(len(tests)) || s.Retransmits != 0 || s.Reconnects != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Calls with malformed or refused headers, sent by hand through the TCP
// client transport.
func TestMalformedCalls(t *testing.T) {
	srv := newTestServer()
	addr, _ := serveTCP(t, srv, TCPOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	tr, err := DialTCP(ctx, addr, TCPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sysBody, _ := (&AuthSysParams{MachineName: "m"}).Credential()
	call := func(xid uint32) CallHeader {
		return CallHeader{XID: xid, RPCVers: 2, Prog: testProg, Vers: 3, Proc: procWhoAmI}
	}
	tests := []struct {
		name   string
		msg    func() []byte
		reject RejectStat
		auth   AuthStat
	}{
		{"rpcvers 3", func() []byte { h := call(1); h.RPCVers = 3; return encodeCall(h) }, RejectRPCMismatch, 0},
		{"rpcvers 1", func() []byte { h := call(2); h.RPCVers = 1; return encodeCall(h)[:12] }, RejectRPCMismatch, 0},
		{"unknown flavor", func() []byte { h := call(3); h.Cred.Flavor = 42; return encodeCall(h) }, RejectAuthError, AuthBadCred},
		{"RPCSEC_GSS", func() []byte {
			h := call(4)
			h.Cred = OpaqueAuth{Flavor: RPCSecGSS, Body: []byte{1, 2, 3, 4}}
			return encodeCall(h)
		}, RejectAuthError, AuthBadCred},
		{"AUTH_SYS garbage", func() []byte {
			h := call(5)
			h.Cred = OpaqueAuth{Flavor: AuthSys, Body: []byte{1, 2, 3}}
			return encodeCall(h)
		}, RejectAuthError, AuthBadCred},
		{"AUTH_NONE with a body", func() []byte {
			h := call(6)
			h.Cred = OpaqueAuth{Flavor: AuthNone, Body: []byte{1}}
			return encodeCall(h)
		}, RejectAuthError, AuthBadCred},
		{"credential over 400 bytes", func() []byte {
			h := call(7)
			h.Cred = OpaqueAuth{Flavor: AuthSys, Body: make([]byte, 404)}
			return encodeCall(h)
		}, RejectAuthError, AuthBadCred},
		{"credential truncated", func() []byte { h := call(8); h.Cred = sysBody; return encodeCall(h)[:30] }, RejectAuthError, AuthBadCred},
		{"AUTH_SYS verifier", func() []byte { h := call(9); h.Cred = sysBody; h.Verf = sysBody; return encodeCall(h) }, RejectAuthError, AuthBadVerf},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rh, err := rawRoundTrip(ctx, tr, tt.msg())
			if err != nil {
				t.Fatal(err)
			}
			if rh.Stat != MsgDenied || rh.Reject != tt.reject || rh.Auth != tt.auth {
				t.Fatalf("reply %+v", rh)
			}
			if tt.reject == RejectRPCMismatch && (rh.Low != 2 || rh.High != 2) {
				t.Fatalf("RPC_MISMATCH %d..%d", rh.Low, rh.High)
			}
		})
	}

	// Undecodable headers get no reply (RFC 5531), and the connection goes on.
	for _, msg := range [][]byte{{1, 2, 3}, encodeCall(call(20))[:16], func() []byte { m := encodeCall(call(21)); m[7] = 1; return m }()} {
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := rawRoundTrip(sctx, tr, msg)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("undecodable call %x: err = %v, want no reply", msg, err)
		}
	}
	if rh, err := rawRoundTrip(ctx, tr, encodeCall(CallHeader{XID: 30, RPCVers: 2, Prog: testProg, Vers: 2})); err != nil || rh.Err() != nil {
		t.Fatalf("NULL after dropped calls: %+v, %v", rh, err)
	}
}

// AUTH_TOOWEAK when the server accepts only AUTH_SYS; NULL stays a ping.
func TestAuthTooWeak(t *testing.T) {
	srv := newTestServer()
	srv.SetAuthFlavors(AuthSys)
	addr, _ := serveTCP(t, srv, TCPOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	c := newTestClient(t, addr, ClientOptions{})
	err := c.Call(ctx, CallSpec{Prog: testProg, Vers: 3, Proc: procWhoAmI})
	var ae *AuthError
	if !errors.Is(err, ErrAuth) || !errors.As(err, &ae) || ae.Stat != AuthTooWeak {
		t.Fatalf("err = %v, want AUTH_TOOWEAK", err)
	}
	if err := c.Null(ctx, testProg, 3); err != nil {
		t.Fatalf("NULL with AUTH_NONE: %v", err)
	}
	cs := newTestClient(t, addr, ClientOptions{AuthSys: &AuthSysParams{MachineName: "x"}})
	if err := cs.Call(ctx, CallSpec{Prog: testProg, Vers: 3, Proc: procWhoAmI}); err != nil {
		t.Fatalf("AUTH_SYS call: %v", err)
	}
}

func TestAuthSysCall(t *testing.T) {
	addr, _ := serveTCP(t, newTestServer(), TCPOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	want := AuthSysParams{Stamp: 42, MachineName: "node-17.example", UID: 1000, GID: 100, GIDs: []uint32{4, 24, 27, 1000}}
	c := newTestClient(t, addr, ClientOptions{AuthSys: &want})
	for range 3 { // also exercises the server's reuse of the parsed credential
		var got AuthSysParams
		var flavor AuthFlavor
		var transport string
		err := c.Call(ctx, CallSpec{Prog: testProg, Vers: 3, Proc: procWhoAmI, Results: func(d *xdr.Decoder, _ int) error {
			flavor = AuthFlavor(d.Uint32())
			got.UID, got.GID = d.Uint32(), d.Uint32()
			got.GIDs = make([]uint32, d.Uint32()%17)
			for i := range got.GIDs {
				got.GIDs[i] = d.Uint32()
			}
			got.MachineName = d.String(255)
			transport = d.String(10)
			return d.Err()
		}})
		if err != nil {
			t.Fatal(err)
		}
		got.Stamp = want.Stamp
		if flavor != AuthSys || transport != "tcp" || got.UID != want.UID || got.GID != want.GID ||
			!slices.Equal(got.GIDs, want.GIDs) || got.MachineName != want.MachineName {
			t.Fatalf("server saw %v %+v over %q, want %+v", flavor, got, transport, want)
		}
	}
}

func TestEchoPayloadSizes(t *testing.T) {
	addr, _ := serveTCP(t, newTestServer(), TCPOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	c := newTestClient(t, addr, ClientOptions{})
	for _, n := range []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 1000, 65537, 1 << 20} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + n)
		}
		got, err := echoCall(ctx, c, data)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: echo differs", n)
		}
	}
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func TestManyConcurrentCalls(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: l}
	addr, _ := serveListener(t, cl, newTestServer(), TCPOptions{})
	ctx := testenv.Context(t, 30*time.Second)
	c := newTestClient(t, addr, ClientOptions{})
	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			data := fmt.Appendf(nil, "call %d with some bytes", i)
			got, err := echoCall(ctx, c, data)
			if err == nil && !bytes.Equal(got, data) {
				err = fmt.Errorf("call %d: got %q", i, got)
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if s := c.Stats(); s.Calls != n || s.Retransmits != 0 || s.Reconnects != 0 {
		t.Fatalf("stats %+v", s)
	}
	if got := cl.n.Load(); got != 1 {
		t.Fatalf("%d connections, want 1", got)
	}
}

// tagServer records, per server instance, the XID each tagged call came
// with; calls whose tag is in block never get a reply from it.
type tagServer struct {
	mu    sync.Mutex
	xids  map[uint32][]uint32 // tag -> XIDs seen
	block func(tag uint32) bool
}

func (ts *tagServer) server() *Server {
	s := NewServer(quiet)
	s.Register(testProg, 3, []Handler{procTag: func(ctx context.Context, req *Request, res *Builder) error {
		d := req.ArgsDecoder()
		tag := d.Uint32()
		if err := d.Err(); err != nil {
			return err
		}
		ts.mu.Lock()
		ts.xids[tag] = append(ts.xids[tag], req.XID)
		ts.mu.Unlock()
		if ts.block(tag) {
			<-ctx.Done() // the server stops before replying
			return ctx.Err()
		}
		res.Uint32(tag)
		return nil
	}})
	return s
}

func tagCall(ctx context.Context, c *Client, tag uint32) error {
	var got uint32
	err := c.Call(ctx, CallSpec{Prog: testProg, Vers: 3, Proc: procTag,
		Args:    func(b *Builder) { b.Uint32(tag) },
		Results: func(d *xdr.Decoder, _ int) error { got = d.Uint32(); return d.Err() }})
	if err == nil && got != tag {
		err = fmt.Errorf("tag %d answered %d", tag, got)
	}
	return err
}

// The server restarts with calls outstanding: the client reconnects and
// retransmits them with their original XIDs, and none is lost.
func TestServerRestartRetransmitsSameXID(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	first := &tagServer{xids: map[uint32][]uint32{}, block: func(tag uint32) bool { return tag%2 == 1 }}
	_, stopFirst := serveListener(t, l, first.server(), TCPOptions{})
	ctx := testenv.Context(t, 30*time.Second)
	c := newTestClient(t, addr, ClientOptions{Retry: RetryPolicy{MaxBackoff: 50 * time.Millisecond}})

	const n = 200
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range uint32(n) {
		wg.Go(func() { errs <- tagCall(ctx, c, i) })
	}
	// Wait until the first server has seen every call, then kill it.
	for {
		first.mu.Lock()
		seen := len(first.xids)
		first.mu.Unlock()
		if seen == n {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("first server saw %d calls", seen)
		case <-time.After(5 * time.Millisecond):
		}
	}
	stopFirst()
	time.Sleep(30 * time.Millisecond) // the client finds nobody listening and backs off
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	second := &tagServer{xids: map[uint32][]uint32{}, block: func(uint32) bool { return false }}
	serveListener(t, l2, second.server(), TCPOptions{})

	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	retransmitted := 0
	first.mu.Lock() // (the race detector sees no ordering through sockets)
	defer first.mu.Unlock()
	second.mu.Lock()
	defer second.mu.Unlock()
	for tag := range uint32(n) {
		a, b := first.xids[tag], second.xids[tag]
		if len(a) != 1 {
			t.Fatalf("tag %d: first server saw XIDs %x", tag, a)
		}
		if tag%2 == 1 && len(b) == 0 {
			t.Fatalf("tag %d: blocked call never reached the second server", tag)
		}
		for _, x := range b {
			if x != a[0] {
				t.Fatalf("tag %d: retransmitted with XID %#x, original %#x", tag, x, a[0])
			}
			retransmitted++
		}
	}
	s := c.Stats()
	if retransmitted < n/2 || s.Retransmits < n/2 || s.Reconnects < 1 || s.Calls != n {
		t.Fatalf("retransmitted %d, stats %+v", retransmitted, s)
	}
}

func TestSoftTimeout(t *testing.T) {
	ts := &tagServer{xids: map[uint32][]uint32{}, block: func(uint32) bool { return true }}
	addr, _ := serveTCP(t, ts.server(), TCPOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	c := newTestClient(t, addr, ClientOptions{Retry: RetryPolicy{Soft: true, Retries: 2, Timeout: 50 * time.Millisecond}})
	start := time.Now()
	err := tagCall(ctx, c, 7)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrTimeout wrapping the per-try deadline", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
		t.Fatalf("gave up after %v, want about 3 x 50ms", d)
	}
	ts.mu.Lock()
	xids := slices.Clone(ts.xids[7])
	ts.mu.Unlock()
	if len(xids) != 3 || xids[0] != xids[1] || xids[1] != xids[2] {
		t.Fatalf("server saw XIDs %x, want 3 transmissions of one XID", xids)
	}
	if s := c.Stats(); s.Retransmits != 2 || s.Reconnects != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestHardCallEndsWithContext(t *testing.T) {
	ts := &tagServer{xids: map[uint32][]uint32{}, block: func(uint32) bool { return true }}
	addr, _ := serveTCP(t, ts.server(), TCPOptions{})
	c := newTestClient(t, addr, ClientOptions{Retry: RetryPolicy{Timeout: 30 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := tagCall(ctx, c, 1)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
	if s := c.Stats(); s.Retransmits < 2 {
		t.Fatalf("stats %+v, want retransmissions every 30ms", s)
	}
	// Nothing listening: a hard call keeps redialing until ctx ends; a soft
	// one gives up after its retries.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	hard := newTestClient(t, dead, ClientOptions{Retry: RetryPolicy{MaxBackoff: 20 * time.Millisecond}})
	ctx2, cancel2 := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel2()
	if err := hard.Null(ctx2, testProg, 3); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Null to nobody: %v, want the dial error at once", err)
	}
	if err := hard.Call(ctx2, CallSpec{Prog: testProg, Vers: 3}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hard call to nobody: %v", err)
	}
	soft := newTestClient(t, dead, ClientOptions{Retry: RetryPolicy{Soft: true, Retries: 3, MaxBackoff: 10 * time.Millisecond}})
	if err := soft.Call(testenv.Context(t, 5*time.Second), CallSpec{Prog: testProg, Vers: 3}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("soft call to nobody: %v", err)
	}
}

func TestClientClose(t *testing.T) {
	ts := &tagServer{xids: map[uint32][]uint32{}, block: func(uint32) bool { return true }}
	addr, _ := serveTCP(t, ts.server(), TCPOptions{})
	c := newTestClient(t, addr, ClientOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	done := make(chan error, 1)
	go func() { done <- tagCall(ctx, c, 1) }()
	for {
		ts.mu.Lock()
		n := len(ts.xids)
		ts.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	c.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("outstanding call: %v, want ErrClosed", err)
	}
	if err := c.Null(ctx, testProg, 3); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}

// A reply of the wrong shape for the call's results surfaces the decoder's
// error, and the XID sequence increments by one.
func TestResultsErrorAndXIDs(t *testing.T) {
	var xids []uint32
	var mu sync.Mutex
	srv := NewServer(quiet)
	srv.Register(testProg, 3, []Handler{1: func(ctx context.Context, req *Request, res *Builder) error {
		mu.Lock()
		xids = append(xids, req.XID)
		mu.Unlock()
		return nil
	}})
	addr, _ := serveTCP(t, srv, TCPOptions{})
	c := newTestClient(t, addr, ClientOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	for range 3 {
		err := c.Call(ctx, CallSpec{Prog: testProg, Vers: 3, Proc: 1, Results: func(d *xdr.Decoder, _ int) error {
			d.Uint32()
			return d.Err()
		}})
		if !errors.Is(err, xdr.ErrShort) {
			t.Fatalf("err = %v, want xdr.ErrShort", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(xids) != 3 || xids[1] != xids[0]+1 || xids[2] != xids[1]+1 {
		t.Fatalf("xids %x", xids)
	}
}

// TestSoftDialTimeout: a server that accepts connections but never
// completes them costs a soft call one failed try per dial, each bounded
// by RetryPolicy.DialTimeout (default max(Timeout, MinDialTimeout)), not
// the transport's own handshake timeout.
func TestSoftDialTimeout(t *testing.T) {
	var mu sync.Mutex
	var deadlines []time.Duration
	dial := func(ctx context.Context) (ClientTransport, error) {
		dl, ok := ctx.Deadline()
		mu.Lock()
		if ok {
			deadlines = append(deadlines, time.Until(dl))
		} else {
			deadlines = append(deadlines, -1)
		}
		mu.Unlock()
		<-ctx.Done() // a handshake that never completes
		return nil, ctx.Err()
	}
	for _, tc := range []struct {
		name string
		p    RetryPolicy
		want time.Duration
	}{
		{"default", RetryPolicy{Soft: true, Retries: 1, Timeout: 100 * time.Millisecond}, MinDialTimeout},
		{"explicit", RetryPolicy{Soft: true, Retries: 1, Timeout: 100 * time.Millisecond, DialTimeout: 200 * time.Millisecond}, 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			deadlines = nil
			mu.Unlock()
			c, err := NewClient(dial, ClientOptions{Retry: tc.p})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := testenv.Context(t, 30*time.Second)
			start := time.Now()
			err = c.Call(ctx, CallSpec{Prog: 1, Vers: 1, Proc: 0})
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("err = %v, want ErrTimeout", err)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Fatalf("gave up after %v", d)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(deadlines) != 2 {
				t.Fatalf("%d dials, want 2 (1 + Retries)", len(deadlines))
			}
			for _, d := range deadlines {
				// The lower bound catches a dial timeout left at Timeout
				// (100 ms) instead of raised to MinDialTimeout.
				if d <= tc.want/2 || d > tc.want {
					t.Fatalf("dial deadlines %v, want each in (%v, %v]", deadlines, tc.want/2, tc.want)
				}
			}
		})
	}
}
