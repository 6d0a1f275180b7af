package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/posixlock"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/lockdtest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockd"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

func TestNLMRange(t *testing.T) {
	for _, tc := range []struct{ start, end, off, n uint64 }{
		{0, MaxLockOffset, 0, 0},
		{10, 19, 10, 10},
		{5, 5, 5, 1},
		{100, 1<<64 - 1, 100, 0}, // past OFFSET_MAX: to the end
	} {
		off, n := nlmRange(tc.start, tc.end)
		if off != tc.off || n != tc.n {
			t.Errorf("nlmRange(%d, %d) = %d, %d; want %d, %d", tc.start, tc.end, off, n, tc.off, tc.n)
		}
	}
	for _, tc := range []struct{ off, n, start, end uint64 }{
		{0, 0, 0, MaxLockOffset},
		{10, 10, 10, 19},
		{1 << 62, 1 << 63, 1 << 62, MaxLockOffset}, // overflows OFFSET_MAX
		{1<<64 - 5, 10, MaxLockOffset, MaxLockOffset},
	} {
		s, e := lockRange(tc.off, tc.n)
		if s != tc.start || e != tc.end {
			t.Errorf("lockRange(%d, %d) = %d, %d; want %d, %d", tc.off, tc.n, s, e, tc.start, tc.end)
		}
	}
}

var testFH = func() nfs3.FH { fh, _ := nfs3.NewFH([]byte("file-handle-1")); return fh }()

// newTestLocker is a Locker of host name caller against srv.
func newTestLocker(t *testing.T, srv *lockdtest.Server, caller string, lo LockOptions) *Locker {
	t.Helper()
	lo.Port, lo.CallerName = srv.Port, caller
	if lo.Poll == 0 {
		lo.Poll = time.Minute // callbacks only, unless a test asks
	}
	if lo.GraceRetry == 0 {
		lo.GraceRetry = 50 * time.Millisecond
	}
	l := NewLocker(Options{Server: "127.0.0.1", Retry: sunrpc.RetryPolicy{Soft: true, Retries: 2, Timeout: 5 * time.Second}, Lock: lo})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Close(ctx)
	})
	return l
}

func startNLM(t *testing.T) *lockdtest.Server {
	srv := lockdtest.Start(t)
	srv.CallbackPort = CallbackPort
	return srv
}

func req(owner uint64, pid uint32, start, end uint64, excl bool) LockRequest {
	return LockRequest{FH: testFH, Owner: owner, Pid: pid, Start: start, End: end, Exclusive: excl}
}

// lockAsync runs a blocking Lock and returns its result channel.
func lockAsync(ctx context.Context, l *Locker, r LockRequest) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- l.Lock(ctx, r, true) }()
	return ch
}

func waitBlocked(t *testing.T, srv *lockdtest.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, w := srv.Locks(); w >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no blocked request on the server: calls %+v", srv.Calls())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLockDeniedAndTest: a conflicting lock is refused without waiting,
// TEST reports the holder's svid (its pid), type and range, and shared
// locks do not conflict.
func TestLockDeniedAndTest(t *testing.T) {
	srv := startNLM(t)
	a := newTestLocker(t, srv, "host-a", LockOptions{})
	b := newTestLocker(t, srv, "host-b", LockOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	if err := a.Lock(ctx, req(1, 4242, 10, 19, true), false); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock(ctx, req(2, 4343, 15, 15, false), false); !errors.Is(err, ErrLockDenied) {
		t.Fatalf("conflicting lock: %v, want ErrLockDenied", err)
	}
	h, err := b.Test(ctx, req(2, 4343, 0, MaxLockOffset, false))
	if err != nil || h == nil {
		t.Fatalf("TEST: %+v, %v", h, err)
	}
	if h.Svid != 4242 || !h.Exclusive || h.Start != 10 || h.End != 19 {
		t.Fatalf("holder %+v, want svid 4242 exclusive 10..19", h)
	}
	if h, err := b.Test(ctx, req(2, 4343, 20, MaxLockOffset, true)); err != nil || h != nil {
		t.Fatalf("TEST of a free range: %+v, %v", h, err)
	}
	if err := a.Lock(ctx, req(1, 4242, 10, 19, false), false); err != nil { // downgrade
		t.Fatal(err)
	}
	if err := b.Lock(ctx, req(2, 4343, 15, 15, false), false); err != nil {
		t.Fatalf("shared lock over a shared lock: %v", err)
	}
}

// TestLockOwners: an owner's svid is its pid unless another owner of the
// Locker has it; owners end when they hold nothing.
func TestLockOwners(t *testing.T) {
	srv := startNLM(t)
	a := newTestLocker(t, srv, "host-a", LockOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	if err := a.Lock(ctx, req(1, 777, 0, 0, true), false); err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(ctx, req(2, 777, 1, 1, true), false); err != nil { // another owner, same pid
		t.Fatal(err)
	}
	held := a.Held()
	if len(held) != 2 {
		t.Fatalf("held %+v", held)
	}
	svids := map[uint64]int32{}
	for _, h := range held {
		svids[h.Owner] = h.Svid
	}
	if svids[1] != 777 || svids[2] >= 0 {
		t.Fatalf("svids %v: want 777 for the first owner, a negative one for the second", svids)
	}
	if err := a.UnlockOwner(ctx, testFH, 1); err != nil {
		t.Fatal(err)
	}
	if len(srv.Held(777)) != 0 || len(a.Held()) != 1 {
		t.Fatalf("after UnlockOwner: server %v, client %+v", srv.Held(777), a.Held())
	}
	a.mu.Lock()
	_, still := a.owners[1]
	a.mu.Unlock()
	if still {
		t.Fatal("owner kept after it released everything")
	}
	n := len(srv.Calls())
	if err := a.UnlockOwner(ctx, testFH, 99); err != nil || len(srv.Calls()) != n {
		t.Fatalf("unlock of an owner holding nothing: %v, %d calls sent", err, len(srv.Calls())-n)
	}
}

// TestLockBlockingGranted: a blocked LOCK completes on the server's
// GRANTED callback (polling is off: one minute).
func TestLockBlockingGranted(t *testing.T) {
	srv := startNLM(t)
	a := newTestLocker(t, srv, "host-a", LockOptions{})
	b := newTestLocker(t, srv, "host-b", LockOptions{})
	ctx := testenv.Context(t, 20*time.Second)
	if err := a.Lock(ctx, req(1, 1001, 0, MaxLockOffset, true), false); err != nil {
		t.Fatal(err)
	}
	got := lockAsync(ctx, b, req(2, 1002, 100, 199, true))
	waitBlocked(t, srv, 1)
	select {
	case err := <-got:
		t.Fatalf("blocked lock returned %v while held", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := a.Unlock(ctx, req(1, 1001, 0, MaxLockOffset, false)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not granted by callback; calls %+v", srv.Calls())
	}
	if b.Stats().Callbacks != 1 {
		t.Fatalf("stats %+v: want the GRANTED callback to complete the wait", b.Stats())
	}
	if r := srv.Held(1002); len(r) != 1 || r[0].Start != 100 || r[0].End != 199 {
		t.Fatalf("server holds %v for b", r)
	}
}

// TestLockBlockingPolled: without callbacks, the blocked LOCK is re-sent
// every Poll and completes when the lock is free.
func TestLockBlockingPolled(t *testing.T) {
	srv := startNLM(t)
	srv.CallbackPort = nil
	a := newTestLocker(t, srv, "host-a", LockOptions{})
	b := newTestLocker(t, srv, "host-b", LockOptions{NoCallbacks: true, Poll: 100 * time.Millisecond})
	ctx := testenv.Context(t, 20*time.Second)
	if err := a.Lock(ctx, req(1, 1001, 0, 9, false), false); err != nil {
		t.Fatal(err)
	}
	got := lockAsync(ctx, b, req(2, 1002, 5, 5, true))
	waitBlocked(t, srv, 1)
	if err := a.Unlock(ctx, req(1, 1001, 0, 9, false)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("polled lock not granted")
	}
	if b.Stats().Callbacks != 0 || len(srv.Held(1002)) != 1 {
		t.Fatalf("stats %+v, server %v", b.Stats(), srv.Held(1002))
	}
}

// TestLockCancel: ending the wait cancels the blocked request; when the
// holder unlocks later, the cancelled owner gets nothing.
func TestLockCancel(t *testing.T) {
	srv := startNLM(t)
	a := newTestLocker(t, srv, "host-a", LockOptions{})
	b := newTestLocker(t, srv, "host-b", LockOptions{})
	ctx := testenv.Context(t, 20*time.Second)
	if err := a.Lock(ctx, req(1, 1001, 0, MaxLockOffset, true), false); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	got := lockAsync(wctx, b, req(2, 1002, 0, MaxLockOffset, true))
	waitBlocked(t, srv, 1)
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, ErrLockInterrupted) {
			t.Fatalf("cancelled wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled wait did not return")
	}
	if _, w := srv.Locks(); w != 0 {
		t.Fatal("blocked request left on the server")
	}
	if err := a.Unlock(ctx, req(1, 1001, 0, MaxLockOffset, false)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if r := srv.Held(1002); len(r) != 0 || len(b.Held()) != 0 {
		t.Fatalf("cancelled owner holds %v (client %v)", r, b.Held())
	}
}

// TestLockCancelGrantRace: the server granted the blocked lock but the
// GRANTED callback did not arrive before the wait ended: CANCEL finds
// nothing blocked, and the client unlocks what it was granted.
func TestLockCancelGrantRace(t *testing.T) {
	srv := startNLM(t)
	srv.CallbackPort = nil // the GRANTED is lost
	// and the CANCEL finds no blocked request (NLM4_DENIED), as when the
	// server granted the lock as the CANCEL went out
	srv.Answer = func(proc uint32, _ *nlm.Lock) (nlm.Stat, bool) { return nlm.Denied, proc == nlm.ProcCancel }
	a := newTestLocker(t, srv, "host-a", LockOptions{})
	b := newTestLocker(t, srv, "host-b", LockOptions{})
	ctx := testenv.Context(t, 20*time.Second)
	if err := a.Lock(ctx, req(1, 1001, 10, MaxLockOffset, true), false); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock(ctx, req(2, 1002, 0, 4, true), false); err != nil { // b holds 0..4 already
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	got := lockAsync(wctx, b, req(2, 1002, 0, MaxLockOffset, true))
	waitBlocked(t, srv, 1)
	if err := a.Unlock(ctx, req(1, 1001, 0, MaxLockOffset, false)); err != nil {
		t.Fatal(err)
	}
	if r := srv.Held(1002); len(r) != 1 || r[0].End != MaxLockOffset {
		t.Fatalf("server did not grant the blocked lock: %v", r)
	}
	cancel()
	if err := <-got; !errors.Is(err, ErrLockInterrupted) {
		t.Fatalf("cancelled wait: %v", err)
	}
	// what was granted as the wait was cancelled is unlocked; what b
	// held before stays
	if r := srv.Held(1002); len(r) != 1 || r[0] != (posixlock.Range{Start: 0, End: 4, Exclusive: true}) {
		t.Fatalf("b holds %v on the server, want 0..4; calls %+v", r, srv.Calls())
	}
	if h := b.Held(); len(h) != 1 || h[0].Start != 0 || h[0].End != 4 {
		t.Fatalf("b's client holds %+v", h)
	}
}

func sendNotify(t *testing.T, monName string, state int32) {
	t.Helper()
	port := CallbackPort()
	if port == 0 {
		t.Fatal("callback service not running")
	}
	c, err := sunrpc.NewClient(sunrpc.TCPDialer("127.0.0.1:"+strconv.Itoa(port), sunrpc.TCPOptions{}), sunrpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := nsm.StatChge{MonName: monName, State: state}
	if err := c.Call(testenv.Context(t, 5*time.Second), sunrpc.CallSpec{Prog: nsm.Program, Vers: nsm.Version, Proc: nsm.ProcNotify,
		Args: func(b *sunrpc.Builder) { a.Encode(&b.Encoder) }}); err != nil {
		t.Fatal("SM_NOTIFY:", err)
	}
}

// TestLockReclaimOnNotify: after the server restarts and sends SM_NOTIFY,
// every held range is sent again with reclaim set, in its grace period.
func TestLockReclaimOnNotify(t *testing.T) {
	srv := startNLM(t)
	a := newTestLocker(t, srv, "host-a", LockOptions{})
	ctx := testenv.Context(t, 20*time.Second)
	if err := a.Lock(ctx, req(1, 1001, 0, 99, false), false); err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(ctx, req(1, 1001, 40, 59, true), false); err != nil { // split: 0-39 r, 40-59 w, 60-99 r
		t.Fatal(err)
	}
	srv.Restart()
	if len(srv.Held(1001)) != 0 {
		t.Fatal("restart kept locks")
	}
	sendNotify(t, "127.0.0.1", 3)
	testenv.Eventually(t, 10*time.Second, "reclaim", func() bool { return len(srv.Held(1001)) == 3 })
	var reclaims int
	for _, c := range srv.Calls() {
		if c.Proc == nlm.ProcLock && c.Reclaim {
			reclaims++
		}
	}
	if reclaims != 3 || a.Stats().Reclaims != 1 {
		t.Fatalf("%d reclaim LOCKs, stats %+v; want 3 and one reclaim", reclaims, a.Stats())
	}
	srv.EndGrace()
	want := []posixlock.Range{{Start: 0, End: 39}, {Start: 40, End: 59, Exclusive: true}, {Start: 60, End: 99}}
	got := srv.Held(1001)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("reclaimed %v, want %v", got, want)
		}
	}
}

// TestLockReclaimOnGrace: without SM_NOTIFY, a call refused for the
// grace period reclaims the held locks and is retried after the grace.
func TestLockReclaimOnGrace(t *testing.T) {
	srv := startNLM(t)
	a := newTestLocker(t, srv, "host-a", LockOptions{NoCallbacks: true})
	ctx := testenv.Context(t, 20*time.Second)
	if err := a.Lock(ctx, req(1, 1001, 0, 9, true), false); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	got := make(chan error, 1)
	go func() { got <- a.Lock(ctx, req(1, 1001, 20, 29, true), false) }()
	testenv.Eventually(t, 10*time.Second, "reclaim in grace", func() bool { return len(srv.Held(1001)) == 1 })
	select {
	case err := <-got:
		t.Fatalf("lock in the grace period returned %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	srv.EndGrace()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if r := srv.Held(1001); len(r) != 2 {
		t.Fatalf("held %v", r)
	}
}

// TestLockGraceWait: a lock call's pauses in the server's grace period
// are told to the context's GraceWait, each Wait followed by a Resume
// before the call is sent again, and none outside them; a Resume that
// blocks holds the call.
func TestLockGraceWait(t *testing.T) {
	srv := startNLM(t)
	a := newTestLocker(t, srv, "host-a", LockOptions{NoCallbacks: true})
	ctx := testenv.Context(t, 20*time.Second)
	if err := a.Lock(ctx, req(1, 1001, 0, 9, true), false); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	waits, resumes := 0, 0
	waiting := false
	hold := make(chan struct{})
	gw := &GraceWait{
		Wait: func() {
			mu.Lock()
			defer mu.Unlock()
			if waiting {
				t.Error("Wait twice without Resume")
			}
			waits++
			waiting = true
		},
		Resume: func() {
			<-hold
			mu.Lock()
			defer mu.Unlock()
			resumes++
			waiting = false
		},
	}
	// outside a grace period: no pause
	if err := a.Lock(WithGraceWait(ctx, gw), req(1, 1001, 10, 19, true), false); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if waits != 0 {
		t.Errorf("%d waits outside the grace period", waits)
	}
	mu.Unlock()
	srv.Restart()
	got := make(chan error, 1)
	go func() { got <- a.Lock(WithGraceWait(ctx, gw), req(1, 1001, 20, 29, true), false) }()
	testenv.Eventually(t, 10*time.Second, "a wait", func() bool { mu.Lock(); defer mu.Unlock(); return waits == 1 })
	// held in Resume: the call is not sent again
	refusals := func() int {
		n := 0
		for _, c := range srv.Calls() {
			if c.Proc == nlm.ProcLock && !c.Reclaim && c.Stat == nlm.DeniedGracePeriod {
				n++
			}
		}
		return n
	}
	before := refusals()
	time.Sleep(300 * time.Millisecond) // six times GraceRetry
	if n := refusals(); n != before {
		t.Fatalf("%d LOCKs sent while Resume held the call", n-before)
	}
	srv.EndGrace()
	close(hold)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if waits != 1 || resumes != 1 || waiting {
		t.Fatalf("%d waits, %d resumes (waiting %v); want one each", waits, resumes, waiting)
	}
}

// TestLockClose: Close unlocks everything held.
func TestLockClose(t *testing.T) {
	srv := startNLM(t)
	a := newTestLocker(t, srv, "host-a", LockOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	for i := range 3 {
		if err := a.Lock(ctx, req(uint64(i+1), uint32(2000+i), uint64(i*10), uint64(i*10+5), true), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if h := srv.HeldBy(); len(h) != 0 {
		t.Fatalf("locks left after Close: %v", h)
	}
	if err := a.Lock(ctx, req(1, 1, 0, 0, true), false); !errors.Is(err, ErrLockService) {
		t.Fatalf("lock after Close: %v", err)
	}
}

// TestLockServiceMissing: no NLM service: ErrLockService.
func TestLockServiceMissing(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	l := NewLocker(Options{Server: "127.0.0.1", Retry: sunrpc.RetryPolicy{Soft: true, Retries: 1, Timeout: time.Second}, Lock: LockOptions{Port: port}})
	defer l.Close(context.Background())
	if err := l.Lock(testenv.Context(t, 10*time.Second), req(1, 1, 0, 0, true), false); !errors.Is(err, ErrLockService) {
		t.Fatalf("lock without a service: %v", err)
	}
}

// TestCallbackGarbage: bad GRANTED and SM_NOTIFY arguments get
// GARBAGE_ARGS, and a GRANTED for no waiting lock NLM4_DENIED.
func TestCallbackGarbage(t *testing.T) {
	srv := startNLM(t)
	a := newTestLocker(t, srv, "host-a", LockOptions{})
	if _, err := a.Test(testenv.Context(t, 5*time.Second), req(1, 1, 0, 0, true)); err != nil { // starts the service
		t.Fatal(err)
	}
	c, err := sunrpc.NewClient(sunrpc.TCPDialer("127.0.0.1:"+strconv.Itoa(CallbackPort()), sunrpc.TCPOptions{}), sunrpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, pv := range [][3]uint32{{nlm.Program, nlm.Version, nlm.ProcGranted}, {nsm.Program, nsm.Version, nsm.ProcNotify}} {
		err := c.Call(testenv.Context(t, 5*time.Second), sunrpc.CallSpec{Prog: pv[0], Vers: pv[1], Proc: pv[2],
			Args: func(b *sunrpc.Builder) { b.Uint32(0xffffffff) }})
		if !errors.Is(err, sunrpc.ErrGarbageArgs) {
			t.Errorf("garbage to %d/%d: %v", pv[0], pv[2], err)
		}
	}
	g := nlm.TestArgs{Cookie: []byte{1}, Lock: nlm.Lock{CallerName: "srv", FH: []byte("nofile"), Svid: 5}}
	var r nlm.Res
	if err := c.Call(testenv.Context(t, 5*time.Second), sunrpc.CallSpec{Prog: nlm.Program, Vers: nlm.Version, Proc: nlm.ProcGranted,
		Args:    func(b *sunrpc.Builder) { g.Encode(&b.Encoder) },
		Results: func(d *xdr.Decoder, _ int) error { return r.Decode(d) }}); err != nil || r.Stat != nlm.Denied {
		t.Fatalf("GRANTED for nothing: %v, %d", err, r.Stat)
	}
}

// TestHostState: the state grows by 2 at each boot, not at each open in
// one boot, and after a reboot the recorded servers get SM_NOTIFY with
// the new state and are forgotten.
func TestHostState(t *testing.T) {
	dir := t.TempDir()
	boot := filepath.Join(t.TempDir(), "boot_id")
	old := bootIDPath
	bootIDPath = boot
	t.Cleanup(func() { bootIDPath = old })
	os.WriteFile(boot, []byte("boot-1\n"), 0o600)

	// an NSM service that records SM_NOTIFY
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan nsm.StatChge, 4)
	rs := sunrpc.NewServer(nil)
	procs := make([]sunrpc.Handler, nsm.ProcNotify+1)
	procs[nsm.ProcNotify] = func(_ context.Context, r *sunrpc.Request, _ *sunrpc.Builder) error {
		var a nsm.StatChge
		if err := a.Decode(r.ArgsDecoder()); err != nil {
			return err
		}
		got <- a
		return nil
	}
	rs.Register(nsm.Program, nsm.Version, procs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sunrpc.ServeTCP(ctx, ln, rs, sunrpc.TCPOptions{})
	no := NotifyOptions{NSMPort: ln.Addr().(*net.TCPAddr).Port}

	h, err := OpenHostState(dir, "node-1", no)
	if err != nil {
		t.Fatal(err)
	}
	s1 := h.State()
	if s1&1 != 1 {
		t.Fatalf("state %d not odd", s1)
	}
	h.monitor("127.0.0.1")
	h2, err := OpenHostState(dir, "node-1", no)
	if err != nil {
		t.Fatal(err)
	}
	if h2.State() != s1 || len(h2.Monitored()) != 1 {
		t.Fatalf("same boot: state %d (was %d), monitored %v", h2.State(), s1, h2.Monitored())
	}
	select {
	case a := <-got:
		t.Fatalf("SM_NOTIFY %+v without a reboot", a)
	case <-time.After(100 * time.Millisecond):
	}
	os.WriteFile(boot, []byte("boot-2\n"), 0o600)
	h3, err := OpenHostState(dir, "node-1", no)
	if err != nil {
		t.Fatal(err)
	}
	if h3.State() != s1+2 {
		t.Fatalf("after reboot: state %d, want %d", h3.State(), s1+2)
	}
	select {
	case a := <-got:
		if a.MonName != "node-1" || a.State != s1+2 {
			t.Fatalf("SM_NOTIFY %+v", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no SM_NOTIFY after a reboot")
	}
	testenv.Eventually(t, 10*time.Second, "record removed", func() bool { return len(h3.Monitored()) == 0 })
}

// TestStatdForward: the callback service's NSM answers SM_MON from this
// host and passes an SM_NOTIFY for the monitored host on to the
// monitor's callback with its private data (as rpc.statd), found through
// the local rpcbind.
func TestStatdForward(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	if _, err := GetPort(ctx, CallbackRPCBind, sunrpc.PortmapProgram, sunrpc.PortmapVersion, sunrpc.TCPOptions{}); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: no rpcbind at", CallbackRPCBind, err)
		}
		t.Skip("no rpcbind at", CallbackRPCBind, err)
	}
	srv := startNLM(t)
	a := newTestLocker(t, srv, "host-a", LockOptions{})
	if _, err := a.Test(ctx, req(1, 1, 0, 0, true)); err != nil { // starts the service
		t.Fatal(err)
	}
	// a monitor's callback: NLM (the only program the status monitor
	// calls back) in a version no lock manager registers, with rpcbind
	prog, vers, proc := uint32(nlm.Program), 0x7100+uint32(os.Getpid()%0x1000), uint32(1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan nlm.SMStatus, 1)
	rs := sunrpc.NewServer(nil)
	rs.Register(prog, vers, []sunrpc.Handler{nil, func(_ context.Context, r *sunrpc.Request, _ *sunrpc.Builder) error {
		var s nlm.SMStatus
		if err := s.Decode(r.ArgsDecoder()); err != nil {
			return err
		}
		got <- s
		return nil
	}})
	sctx, stop := context.WithCancel(context.Background())
	defer stop()
	go sunrpc.ServeTCP(sctx, ln, rs, sunrpc.TCPOptions{})
	mp := sunrpc.Mapping{Prog: prog, Vers: vers, Prot: sunrpc.IPProtoTCP, Port: uint32(ln.Addr().(*net.TCPAddr).Port)}
	if err := sunrpc.PortmapSet(ctx, CallbackRPCBind, mp); err != nil {
		t.Fatal("rpcbind SET:", err)
	}
	defer sunrpc.PortmapUnset(context.Background(), CallbackRPCBind, mp)

	c, err := sunrpc.NewClient(sunrpc.TCPDialer("127.0.0.1:"+strconv.Itoa(CallbackPort()), sunrpc.TCPOptions{}), sunrpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mon := nsm.Mon{MonID: nsm.MonID{MonName: "server-x", MyID: nsm.MyID{MyName: "localhost", MyProg: prog, MyVers: vers, MyProc: proc}}}
	copy(mon.Priv[:], "private-16-bytes")
	var res nsm.StatRes
	if err := c.Call(ctx, sunrpc.CallSpec{Prog: nsm.Program, Vers: nsm.Version, Proc: nsm.ProcMon,
		Args:    func(b *sunrpc.Builder) { mon.Encode(&b.Encoder) },
		Results: func(d *xdr.Decoder, _ int) error { return res.Decode(d) }}); err != nil || res.Res != nsm.StatSucc || res.State&1 != 1 {
		t.Fatalf("SM_MON: %+v, %v", res, err)
	}
	sendNotify(t, "server-x", 9)
	select {
	case s := <-got:
		if s.MonName != "server-x" || s.State != 9 || string(s.Priv[:]) != "private-16-bytes" {
			t.Fatalf("callback got %+v", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SM_NOTIFY not passed on to the monitor")
	}
}

// TestClientRebootFreesLocks: a host that held locks and rebooted tells
// the server (SM_NOTIFY from its state directory, with a new state), and
// the export server's lock manager frees the locks it held before.
func TestClientRebootFreesLocks(t *testing.T) {
	m, err := lockd.New(lockd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rs := sunrpc.NewServer(nil)
	rs.Register(nlm.Program, nlm.Version, m.NLMHandlers())
	rs.Register(nsm.Program, nsm.Version, m.NSMHandlers())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	defer stop()
	go sunrpc.ServeTCP(sctx, ln, rs, sunrpc.TCPOptions{})
	port := ln.Addr().(*net.TCPAddr).Port

	dir := t.TempDir()
	boot := filepath.Join(t.TempDir(), "boot_id")
	old := bootIDPath
	bootIDPath = boot
	t.Cleanup(func() { bootIDPath = old })
	os.WriteFile(boot, []byte("boot-1\n"), 0o600)
	no := NotifyOptions{NSMPort: port}
	hs, err := OpenHostState(dir, "node-x", no)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(caller string, hs *HostState) *Locker {
		return NewLocker(Options{Server: "127.0.0.1", Retry: sunrpc.RetryPolicy{Soft: true, Retries: 2, Timeout: 5 * time.Second},
			Lock: LockOptions{Port: port, CallerName: caller, State: hs, NoCallbacks: true}})
	}
	ctx := testenv.Context(t, 20*time.Second)
	a := mk("node-x", hs) // never closed: the host goes down holding it
	if err := a.Lock(ctx, req(1, 4001, 0, MaxLockOffset, true), false); err != nil {
		t.Fatal(err)
	}
	b := mk("node-y", nil)
	defer b.Close(ctx)
	if err := b.Lock(ctx, req(2, 4002, 0, 0, true), false); !errors.Is(err, ErrLockDenied) {
		t.Fatalf("lock held by node-x: %v", err)
	}
	if mon := hs.Monitored(); len(mon) != 1 || mon[0] != "127.0.0.1" {
		t.Fatalf("monitored servers %v", mon)
	}
	os.WriteFile(boot, []byte("boot-2\n"), 0o600) // node-x reboots
	if _, err := OpenHostState(dir, "node-x", no); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the old locks freed", func() bool { return b.Lock(ctx, req(2, 4002, 0, 0, true), false) == nil })
}

// TestLockGrantedFromOtherAddress: a GRANTED that names a blocked lock but comes
// from another address than the one the mount reaches the server at (a Service
// address the cluster translates to the server pod's) wakes the waiter, which
// re-sends its LOCK at once and is completed by the server's answer: long before
// its re-send timer, and counted as granted by callback. A GRANTED for the same
// lock while the server still blocks it (anyone else's) completes nothing.
func TestLockGrantedFromOtherAddress(t *testing.T) {
	srv := startNLM(t)
	a := newTestLocker(t, srv, "host-a", LockOptions{})
	b := newTestLocker(t, srv, "host-b", LockOptions{Poll: time.Minute})
	ctx := testenv.Context(t, 30*time.Second)
	if err := a.Lock(ctx, req(1, 1001, 0, MaxLockOffset, true), false); err != nil {
		t.Fatal(err)
	}
	got := lockAsync(ctx, b, req(2, 1002, 100, 199, true))
	waitBlocked(t, srv, 1)
	// the mount reached the server at a Service address
	b.mu.Lock()
	b.serverIP = net.ParseIP("10.96.0.10")
	var w *waiter
	for x := range b.waiters {
		w = x
	}
	b.mu.Unlock()
	if w == nil {
		t.Fatal("no waiter")
	}
	// a GRANTED from elsewhere while the lock is still held: the waiter asks the
	// server again, which still blocks it
	spoof := nlm.TestArgs{Cookie: []byte("x"), Exclusive: true, Lock: nlm.Lock{CallerName: "host-b", FH: []byte(w.fh), Svid: w.svid, Offset: w.offset, Length: w.length}}
	if st := callbacks.granted(&spoof, &net.TCPAddr{IP: net.ParseIP("192.0.2.99"), Port: 1}); st != nlm.Granted {
		t.Fatalf("GRANTED naming a blocked lock answered %v", st)
	}
	select {
	case err := <-got:
		t.Fatalf("a GRANTED not confirmed by the server completed the wait: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	t0 := time.Now()
	if err := a.Unlock(ctx, req(1, 1001, 0, MaxLockOffset, false)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not granted (re-send every minute); calls %+v", srv.Calls())
	}
	t.Logf("granted %v after the unlock", time.Since(t0).Round(time.Millisecond))
	if st := b.Stats(); st.Callbacks != 1 || st.Retries != 0 {
		t.Fatalf("stats %+v: want the GRANTED callback, confirmed by LOCK, to complete the wait", st)
	}
	if r := srv.Held(1002); len(r) != 1 || r[0].Start != 100 || r[0].End != 199 {
		t.Fatalf("server holds %v for b", r)
	}
}

// TestLockConfirmAfterAdopt: a Locker that adopted another's locks asks
// the server for them again: a server that restarted meanwhile (its
// SM_NOTIFY gone to the other process) gets them reclaimed in its grace
// period, so that another owner is refused after it; a server that holds
// them grants them again with no reclaim.
func TestLockConfirmAfterAdopt(t *testing.T) {
	for _, restart := range []bool{true, false} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			srv := startNLM(t)
			a := newTestLocker(t, srv, "host-a", LockOptions{NoCallbacks: true})
			ctx := testenv.Context(t, 20*time.Second)
			if err := a.Lock(ctx, req(1, 1001, 0, 9, true), false); err != nil {
				t.Fatal(err)
			}
			st := a.State()
			if restart {
				srv.Restart()
			}
			b := newTestLocker(t, srv, "host-a", LockOptions{NoCallbacks: true})
			if err := b.Adopt(st); err != nil {
				t.Fatal(err)
			}
			b.Confirm(ctx)
			if r := srv.Held(1001); len(r) != 1 || r[0] != (posixlock.Range{Start: 0, End: 9, Exclusive: true}) {
				t.Fatalf("the server holds %v for svid 1001 after Confirm; calls %+v", r, srv.Calls())
			}
			var reclaims int
			for _, c := range srv.Calls() {
				if c.Proc == nlm.ProcLock && c.Reclaim {
					reclaims++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[restart]; reclaims != want {
				t.Fatalf("%d reclaim LOCKs, want %d", reclaims, want)
			}
			srv.EndGrace()
			other := newTestLocker(t, srv, "host-b", LockOptions{NoCallbacks: true})
			if err := other.Lock(ctx, req(1, 2002, 5, 5, true), false); !errors.Is(err, ErrLockDenied) {
				t.Fatalf("another owner's lock on the confirmed range: %v, want denied", err)
			}
			if h := b.Held(); len(h) != 1 {
				t.Fatalf("b holds %+v", h)
			}
		})
	}
}
