package sunrpc

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// recorder is an Observer keeping every observation.
type recorder struct {
	mu  sync.Mutex
	obs []observation
}

type observation struct {
	prog, vers, proc uint32
	transport        string
	status           CallStatus
	d                time.Duration
}

func (r *recorder) ObserveCall(req *Request, st CallStatus, d time.Duration) {
	r.mu.Lock()
	r.obs = append(r.obs, observation{req.Prog, req.Vers, req.Proc, req.Transport, st, d})
	r.mu.Unlock()
}

func (r *recorder) take() []observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.obs
	r.obs = nil
	return o
}

// Every status the dispatcher can produce reaches the observer, with the
// call's program, version, procedure and transport, through a real TCP
// client and server; removing the observer stops the observations.
func TestObserverStatuses(t *testing.T) {
	srv := newTestServer()
	rec := &recorder{}
	srv.SetObserver(rec)
	addr, _ := serveTCP(t, srv, TCPOptions{})
	c := newTestClient(t, addr, ClientOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	tests := []struct {
		prog, vers, proc uint32
		want             CallStatus
	}{
		{testProg, 3, 0, StatusSuccess},
		{testProg, 3, procWhoAmI, StatusSuccess},
		{12345, 1, 0, StatusProgUnavail},
		{testProg, 9, 0, StatusProgMismatch},
		{testProg, 3, 99, StatusProcUnavail},
		{testProg, 3, procGarbage, StatusGarbageArgs},
		{testProg, 3, procFail, StatusSystemErr},
		{testProg, 3, procPanic, StatusSystemErr},
		{testProg, 3, procDeny, StatusAuthError},
	}
	for _, tt := range tests {
		_ = c.Call(ctx, CallSpec{Prog: tt.prog, Vers: tt.vers, Proc: tt.proc})
		got := rec.take()
		if len(got) != 1 {
			t.Fatalf("%d/%d/%d: %d observations, want 1", tt.prog, tt.vers, tt.proc, len(got))
		}
		o := got[0]
		if o.prog != tt.prog || o.vers != tt.vers || o.proc != tt.proc || o.status != tt.want || o.transport != "tcp" || o.d <= 0 {
			t.Errorf("%d/%d/%d: observed %+v, want status %v", tt.prog, tt.vers, tt.proc, o, tt.want)
		}
	}

	// Denied and dropped calls, sent by hand.
	tr, err := DialTCP(ctx, addr, TCPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	h := CallHeader{XID: 1, RPCVers: 3, Prog: testProg, Vers: 3, Proc: procWhoAmI}
	if _, err := rawRoundTrip(ctx, tr, encodeCall(h)); err != nil {
		t.Fatal(err)
	}
	h = CallHeader{XID: 2, RPCVers: 2, Prog: testProg, Vers: 3, Proc: procWhoAmI, Cred: OpaqueAuth{Flavor: 42}}
	if _, err := rawRoundTrip(ctx, tr, encodeCall(h)); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = rawRoundTrip(sctx, tr, []byte{0, 0, 0, 3, 1, 2})
	cancel()
	if err == nil {
		t.Fatal("undecodable call answered")
	}
	got := rec.take()
	want := []CallStatus{StatusRPCMismatch, StatusAuthError, StatusDropped}
	if len(got) != len(want) {
		t.Fatalf("observations %+v, want statuses %v", got, want)
	}
	for i, o := range got {
		if o.status != want[i] {
			t.Errorf("observation %d: %+v, want %v", i, o, want[i])
		}
	}

	srv.SetObserver(nil)
	if err := c.Null(ctx, testProg, 3); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("observed %+v after SetObserver(nil)", got)
	}
}

// A handler that fails after its ctx ended gets no reply: observed as
// dropped.
func TestObserverDroppedOnStop(t *testing.T) {
	srv := newTestServer()
	entered := make(chan struct{})
	srv.Register(testProg+1, 1, []Handler{1: func(ctx context.Context, req *Request, res *Builder) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	}})
	rec := &recorder{}
	srv.SetObserver(rec)
	addr, stop := serveTCP(t, srv, TCPOptions{})
	c := newTestClient(t, addr, ClientOptions{Retry: RetryPolicy{Soft: true, Retries: 0, Timeout: 200 * time.Millisecond}})
	ctx := testenv.Context(t, 10*time.Second)
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, CallSpec{Prog: testProg + 1, Vers: 1, Proc: 1}) }()
	<-entered
	stop()
	<-done
	got := rec.take()
	if len(got) != 1 || got[0].status != StatusDropped || got[0].prog != testProg+1 || got[0].proc != 1 {
		t.Fatalf("observations %+v, want one dropped call", got)
	}
}

func TestCallStatusString(t *testing.T) {
	for st, want := range map[CallStatus]string{
		StatusSuccess: "success", StatusGarbageArgs: "garbage_args", StatusSystemErr: "system_err",
		StatusRPCMismatch: "rpc_mismatch", StatusAuthError: "auth_error", StatusDropped: "dropped", 200: "status(200)",
	} {
		if got := st.String(); got != want {
			t.Errorf("%d: %q, want %q", st, got, want)
		}
	}
	for a := Success; a <= SystemErr; a++ {
		if CallStatus(a).String() != fmt.Sprint(map[AcceptStat]string{0: "success", 1: "prog_unavail", 2: "prog_mismatch", 3: "proc_unavail", 4: "garbage_args", 5: "system_err"}[a]) {
			t.Errorf("accept_stat %v: %v", a, CallStatus(a))
		}
	}
}

type nopObserver struct{}

func (nopObserver) ObserveCall(*Request, CallStatus, time.Duration) {}

// BenchmarkDispatchObserver measures Dispatch of a NULL call and of a
// small AUTH_SYS echo, without an observer (baseline), with an observer
// that does nothing (the hook's own cost: clock reads and the call).
func BenchmarkDispatchObserver(b *testing.B) {
	sys, _ := (&AuthSysParams{MachineName: "bench", UID: 1000, GID: 1000, GIDs: []uint32{1, 2, 3}}).Credential()
	calls := map[string][]byte{
		"null": encodeCall(CallHeader{XID: 7, RPCVers: 2, Prog: testProg, Vers: 3, Proc: 0}),
		"echo": encodeCall(CallHeader{XID: 8, RPCVers: 2, Prog: testProg, Vers: 3, Proc: procEcho, Cred: sys}, 4, 0x01020304),
	}
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	for _, name := range []string{"null", "echo"} {
		for _, obs := range []struct {
			name string
			o    Observer
		}{{"baseline=none", nil}, {"nop", nopObserver{}}} {
			b.Run(name+"/observer="+obs.name, func(b *testing.B) {
				srv := newTestServer()
				srv.SetObserver(obs.o)
				var req Request
				out := NewBuilder(make([]byte, 0, 512))
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					req.Reset(calls[name], nil, peer, "tcp")
					out.Reset(out.Bytes()[:0])
					if !srv.Dispatch(ctx, &req, out) {
						b.Fatal("dropped")
					}
				}
			})
		}
	}
}

// BenchmarkNullTCPObserver is a whole NULL call over TCP (client, record
// marking, loopback, dispatch), 1 outstanding, without and with an
// observer: the hook's cost in context.
func BenchmarkNullTCPObserver(b *testing.B) {
	for _, obs := range []struct {
		name string
		o    Observer
	}{{"baseline=none", nil}, {"nop", nopObserver{}}} {
		b.Run("observer="+obs.name, func(b *testing.B) {
			srv := newTestServer()
			srv.SetObserver(obs.o)
			addr, _ := serveTCP(b, srv, TCPOptions{})
			c := newTestClient(b, addr, ClientOptions{})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Null(ctx, testProg, 3); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
