package lockd

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// TestServiceLockTestUnlock: an exclusive lock of one host blocks another
// host's TEST (which names the holder), non-blocking LOCK (DENIED) until
// it is unlocked; cookies are echoed.
func TestServiceLockTestUnlock(t *testing.T) {
	p := newPeer(t)
	s := startManager(t, Options{LookupPort: p.lookup})
	a, b := dial(t, s.addr, ""), dial(t, s.addr, "")
	la := lk("node-a", 10, "fh1", 0, 100)
	if st := a.nlm(t, nlm.ProcLock, &nlm.LockArgs{Cookie: []byte("c1"), Exclusive: true, Lock: la}); st != nlm.Granted {
		t.Fatalf("LOCK a: %v", st)
	}
	res := b.test(t, &nlm.TestArgs{Cookie: []byte("c2"), Lock: lk("node-b", 20, "fh1", 50, 1)})
	if res.Stat != nlm.Denied || res.Holder == nil || !res.Holder.Exclusive || res.Holder.Svid != 10 || string(res.Holder.OH) != "10@node-a" || res.Holder.Offset != 0 || res.Holder.Length != 100 {
		t.Fatalf("TEST b: %+v %+v", res, res.Holder)
	}
	if res := b.test(t, &nlm.TestArgs{Cookie: []byte("c3"), Lock: lk("node-b", 20, "fh1", 100, 0)}); res.Stat != nlm.Granted || res.Holder != nil {
		t.Fatalf("TEST b past the lock: %+v", res)
	}
	if res := b.test(t, &nlm.TestArgs{Lock: lk("node-b", 20, "fh2", 0, 0)}); res.Stat != nlm.Granted {
		t.Fatalf("TEST other file: %+v", res)
	}
	var r nlm.Res
	if err := b.call(nlm.Program, nlm.Version, nlm.ProcLock, &nlm.LockArgs{Cookie: []byte("cookie-4"), Lock: lk("node-b", 20, "fh1", 99, 1)}, &r); err != nil || r.Stat != nlm.Denied || string(r.Cookie) != "cookie-4" {
		t.Fatalf("LOCK b: %+v %v", r, err)
	}
	if st := a.nlm(t, nlm.ProcUnlock, &nlm.UnlockArgs{Lock: la}); st != nlm.Granted {
		t.Fatalf("UNLOCK a: %v", st)
	}
	if st := b.nlm(t, nlm.ProcLock, &nlm.LockArgs{Lock: lk("node-b", 20, "fh1", 99, 1)}); st != nlm.Granted {
		t.Fatalf("LOCK b after unlock: %v", st)
	}
	// unlock of nothing, and by an unknown owner: granted, no change
	if st := a.nlm(t, nlm.ProcUnlock, &nlm.UnlockArgs{Lock: lk("node-z", 1, "fh9", 0, 0)}); st != nlm.Granted {
		t.Fatalf("UNLOCK nothing: %v", st)
	}
	if st := a.nlm(t, nlm.ProcUnlock, &nlm.UnlockArgs{Lock: lk("node-a", 10, "fh1", 0, 0)}); st != nlm.Granted || len(s.m.Held("fh1")) != 1 {
		t.Fatalf("UNLOCK by another owner: %v, held %v", st, s.m.Held("fh1"))
	}
}

// TestServiceBlockingGranted: a blocking LOCK that conflicts is BLOCKED;
// when the holder unlocks, the server takes the lock for the waiter and
// calls GRANTED on the waiter's NLM service with the waiter's lock.
func TestServiceBlockingGranted(t *testing.T) {
	p := newPeer(t)
	s := startManager(t, Options{LookupPort: p.lookup})
	a, b := dial(t, s.addr, ""), dial(t, s.addr, "")
	la := lk("node-a", 1, "fh", 0, 0)
	lb := lk("node-b", 2, "fh", 10, 5)
	if st := a.nlm(t, nlm.ProcLock, &nlm.LockArgs{Exclusive: true, Lock: la}); st != nlm.Granted {
		t.Fatal(st)
	}
	if st := b.nlm(t, nlm.ProcLock, &nlm.LockArgs{Cookie: []byte("b1"), Block: true, Exclusive: true, Lock: lb}); st != nlm.Blocked {
		t.Fatalf("blocking LOCK: %v", st)
	}
	// re-sent while waiting: still BLOCKED, queued once
	if st := b.nlm(t, nlm.ProcLock, &nlm.LockArgs{Cookie: []byte("b2"), Block: true, Exclusive: true, Lock: lb}); st != nlm.Blocked || s.m.Waiting("fh") != 1 {
		t.Fatalf("re-sent blocking LOCK: %v, %d waiting", st, s.m.Waiting("fh"))
	}
	if len(p.grants()) != 0 {
		t.Fatal("GRANTED before unlock")
	}
	if st := a.nlm(t, nlm.ProcUnlock, &nlm.UnlockArgs{Lock: la}); st != nlm.Granted {
		t.Fatal(st)
	}
	p.wait(t, "GRANTED")
	g := p.grants()
	if len(g) != 1 || !g[0].Exclusive || g[0].Lock.CallerName != "node-b" || g[0].Lock.Svid != 2 || string(g[0].Lock.OH) != "2@node-b" ||
		string(g[0].Lock.FH) != "fh" || g[0].Lock.Offset != 10 || g[0].Lock.Length != 5 || len(g[0].Cookie) == 0 {
		t.Fatalf("GRANTED args: %+v", g)
	}
	testenv.Eventually(t, 10*time.Second, "the acknowledged block to go", func() bool { return s.m.Waiting("fh") == 0 })
	if res := a.test(t, &nlm.TestArgs{Lock: lk("node-a", 1, "fh", 12, 1)}); res.Stat != nlm.Denied || res.Holder.Svid != 2 {
		t.Fatalf("TEST after grant: %+v", res)
	}
}

// TestServiceGrantedCallbackFails: the waiter cannot be called back; the
// lock stays granted to it (others are denied), and the waiter's re-sent
// LOCK is answered GRANTED and settles the grant: no GRANTED follows once
// the waiter can be reached. (The retries: TestServiceGrantedRetried.)
func TestServiceGrantedCallbackFails(t *testing.T) {
	p := newPeer(t)
	p.setDown(true)
	// no retry within the test: a retry already under way when the re-sent
	// LOCK settles the grant could still reach the waiter (and be ignored)
	s := startManager(t, Options{LookupPort: p.lookup, RetryInterval: time.Hour})
	a, b, c := dial(t, s.addr, ""), dial(t, s.addr, ""), dial(t, s.addr, "")
	la, lb := lk("node-a", 1, "fh", 0, 10), lk("node-b", 2, "fh", 0, 10)
	a.nlm(t, nlm.ProcLock, &nlm.LockArgs{Exclusive: true, Lock: la})
	if st := b.nlm(t, nlm.ProcLock, &nlm.LockArgs{Block: true, Exclusive: true, Lock: lb}); st != nlm.Blocked {
		t.Fatal(st)
	}
	a.nlm(t, nlm.ProcUnlock, &nlm.UnlockArgs{Lock: la})
	testenv.Eventually(t, 10*time.Second, "the grant", func() bool { h := s.m.Held("fh"); return len(h) == 1 && h[0].Owner.Caller == "node-b" })
	testenv.Eventually(t, 10*time.Second, "the failed GRANTED callback", func() bool { return p.refusedLookups() > 0 })
	if st := c.nlm(t, nlm.ProcLock, &nlm.LockArgs{Lock: lk("node-c", 3, "fh", 5, 1)}); st != nlm.Denied {
		t.Fatalf("third host while granted-pending: %v", st)
	}
	if s.m.Waiting("fh") != 1 {
		t.Fatal("pending grant dropped")
	}
	if st := b.nlm(t, nlm.ProcLock, &nlm.LockArgs{Block: true, Exclusive: true, Lock: lb}); st != nlm.Granted {
		t.Fatalf("re-sent LOCK after the grant: %v", st)
	}
	if s.m.Waiting("fh") != 0 {
		t.Fatal("pending grant kept after the re-sent LOCK")
	}
	p.setDown(false)
	time.Sleep(400 * time.Millisecond)
	if n := len(p.grants()); n != 0 {
		t.Fatalf("GRANTED sent %d times after the client had the lock", n)
	}
}

// TestServiceGrantedRetried: a callback that failed is retried until the
// client answers it.
func TestServiceGrantedRetried(t *testing.T) {
	p := newPeer(t)
	p.setDown(true)
	s := startManager(t, Options{LookupPort: p.lookup, RetryInterval: 100 * time.Millisecond})
	a, b := dial(t, s.addr, ""), dial(t, s.addr, "")
	la, lb := lk("node-a", 1, "fh", 0, 10), lk("node-b", 2, "fh", 0, 10)
	a.nlm(t, nlm.ProcLock, &nlm.LockArgs{Exclusive: true, Lock: la})
	b.nlm(t, nlm.ProcLock, &nlm.LockArgs{Block: true, Lock: lb})
	a.nlm(t, nlm.ProcUnlock, &nlm.UnlockArgs{Lock: la})
	time.Sleep(300 * time.Millisecond)
	p.setDown(false)
	p.wait(t, "GRANTED retried")
	testenv.Eventually(t, 10*time.Second, "the block to go", func() bool { return s.m.Waiting("fh") == 0 })
}

// TestServiceGrantedRefused: a client that answers GRANTED with DENIED
// (it gave up waiting) does not get the lock: it is released and the next
// waiter is granted.
func TestServiceGrantedRefused(t *testing.T) {
	p := newPeer(t)
	p.answer = nlm.Denied
	s := startManager(t, Options{LookupPort: p.lookup})
	a, b := dial(t, s.addr, ""), dial(t, s.addr, "")
	la, lb := lk("node-a", 1, "fh", 0, 10), lk("node-b", 2, "fh", 0, 10)
	a.nlm(t, nlm.ProcLock, &nlm.LockArgs{Exclusive: true, Lock: la})
	b.nlm(t, nlm.ProcLock, &nlm.LockArgs{Block: true, Lock: lb})
	a.nlm(t, nlm.ProcUnlock, &nlm.UnlockArgs{Lock: la})
	p.wait(t, "GRANTED")
	testenv.Eventually(t, 10*time.Second, "the refused lock to go", func() bool { return len(s.m.Held("fh")) == 0 && s.m.Waiting("fh") == 0 })
}

// TestServiceCancel: CANCEL removes a queued request, which is then never
// granted; CANCEL of nothing is GRANTED.
func TestServiceCancel(t *testing.T) {
	p := newPeer(t)
	s := startManager(t, Options{LookupPort: p.lookup})
	a, b := dial(t, s.addr, ""), dial(t, s.addr, "")
	la, lb := lk("node-a", 1, "fh", 0, 10), lk("node-b", 2, "fh", 0, 10)
	a.nlm(t, nlm.ProcLock, &nlm.LockArgs{Exclusive: true, Lock: la})
	if st := b.nlm(t, nlm.ProcLock, &nlm.LockArgs{Block: true, Exclusive: true, Lock: lb}); st != nlm.Blocked {
		t.Fatal(st)
	}
	if st := b.nlm(t, nlm.ProcCancel, &nlm.CancArgs{Block: true, Exclusive: true, Lock: lb}); st != nlm.Granted || s.m.Waiting("fh") != 0 {
		t.Fatalf("CANCEL: %v, %d waiting", st, s.m.Waiting("fh"))
	}
	a.nlm(t, nlm.ProcUnlock, &nlm.UnlockArgs{Lock: la})
	time.Sleep(200 * time.Millisecond)
	if len(p.grants()) != 0 || len(s.m.Held("fh")) != 0 {
		t.Fatalf("cancelled request granted: %v %v", p.grants(), s.m.Held("fh"))
	}
	if st := b.nlm(t, nlm.ProcCancel, &nlm.CancArgs{Lock: lk("node-q", 9, "nope", 0, 0)}); st != nlm.Granted {
		t.Fatalf("CANCEL of nothing: %v", st)
	}
}

// TestServiceBadRequests: overflowing ranges are NLM4_FBIG, an unknown
// file handle NLM4_STALE_FH, malformed arguments GARBAGE_ARGS, a
// GRANTED_RES with an unknown cookie is ignored, procedures not offered
// are PROC_UNAVAIL, NSM_NOTIFY from an unprivileged port SYSTEM_ERR.
func TestServiceBadRequests(t *testing.T) {
	p := newPeer(t)
	s := startManager(t, Options{LookupPort: p.lookup, FileKey: func(fh []byte, _ *sunrpc.Request) (string, nlm.Stat) {
		if !bytes.HasPrefix(fh, []byte("fh")) {
			return "", nlm.StaleFH
		}
		return string(fh), nlm.Granted
	}})
	a := dial(t, s.addr, "")
	big := lk("node-a", 1, "fh", 1<<63, 1)
	if st := a.nlm(t, nlm.ProcLock, &nlm.LockArgs{Lock: big}); st != nlm.FBig {
		t.Fatalf("LOCK past 2^63-1: %v", st)
	}
	wrap := lk("node-a", 1, "fh", 10, ^uint64(0)-5)
	if st := a.nlm(t, nlm.ProcUnlock, &nlm.UnlockArgs{Lock: wrap}); st != nlm.FBig {
		t.Fatalf("UNLOCK with wrapping length: %v", st)
	}
	if res := a.test(t, &nlm.TestArgs{Lock: wrap}); res.Stat != nlm.FBig {
		t.Fatalf("TEST with wrapping length: %v", res.Stat)
	}
	if st := a.nlm(t, nlm.ProcLock, &nlm.LockArgs{Lock: lk("node-a", 1, "bogus", 0, 1)}); st != nlm.StaleFH {
		t.Fatalf("LOCK on unknown handle: %v", st)
	}
	if st := a.nlm(t, nlm.ProcCancel, &nlm.CancArgs{Lock: lk("node-a", 1, "bogus", 0, 1)}); st != nlm.StaleFH {
		t.Fatalf("CANCEL on unknown handle: %v", st)
	}
	for _, proc := range []uint32{nlm.ProcTest, nlm.ProcLock, nlm.ProcCancel, nlm.ProcUnlock, nlm.ProcFreeAll, nlm.ProcGrantedRes, nlm.ProcNSMNotify, nlm.ProcNMLock} {
		err := a.call(nlm.Program, nlm.Version, proc, rawArgs{0xffffffff}, nil)
		if !errors.Is(err, sunrpc.ErrGarbageArgs) {
			t.Errorf("%s with garbage: %v", nlm.ProcName(proc), err)
		}
	}
	if err := a.call(nlm.Program, nlm.Version, nlm.ProcGrantedRes, &nlm.Res{Cookie: []byte("unknown"), Stat: nlm.Granted}, nil); err != nil {
		t.Fatalf("GRANTED_RES unknown cookie: %v", err)
	}
	for _, proc := range []uint32{nlm.ProcGranted, nlm.ProcShare, 17, 30} {
		if err := a.call(nlm.Program, nlm.Version, proc, nil, nil); !errors.Is(err, sunrpc.ErrProcUnavail) {
			t.Errorf("%s: %v", nlm.ProcName(proc), err)
		}
	}
	if err := a.call(nlm.Program, nlm.Version, nlm.ProcNSMNotify, &nlm.SMStatus{MonName: "node-a"}, nil); !errors.Is(err, sunrpc.ErrSystemErr) {
		t.Fatalf("NSM_NOTIFY from an unprivileged port: %v", err)
	}
	if err := a.call(nsm.Program, nsm.Version, nsm.ProcNotify, rawArgs{5000}, nil); !errors.Is(err, sunrpc.ErrGarbageArgs) {
		t.Fatalf("SM_NOTIFY garbage: %v", err)
	}
	var sr nsm.StatRes
	if err := a.call(nsm.Program, nsm.Version, nsm.ProcStat, &nsm.SMName{MonName: "x"}, &sr); err != nil || sr.Res != nsm.StatSucc || sr.State != s.m.State() {
		t.Fatalf("SM_STAT: %+v %v", sr, err)
	}
	if err := a.call(nsm.Program, nsm.Version, nsm.ProcMon, &nsm.Mon{MonID: nsm.MonID{MonName: "x"}}, &sr); err != nil || sr.Res != nsm.StatFail {
		t.Fatalf("SM_MON: %+v %v", sr, err)
	}
}

// rawArgs encodes 4-byte words as arguments.
type rawArgs []uint32

func (r rawArgs) Encode(e *xdr.Encoder) {
	for _, v := range r {
		e.Uint32(v)
	}
}
func (r rawArgs) Decode(*xdr.Decoder) error { return nil }

// TestServiceFreeAllAndNotify: FREE_ALL and an SM_NOTIFY from the
// client's address release all its locks and queued requests; an
// SM_NOTIFY naming the client from another address is ignored.
func TestServiceFreeAllAndNotify(t *testing.T) {
	p := newPeer(t)
	s := startManager(t, Options{LookupPort: p.lookup})
	a, b := dial(t, s.addr, ""), dial(t, s.addr, "")
	a.nlm(t, nlm.ProcLock, &nlm.LockArgs{Exclusive: true, Lock: lk("node-a", 1, "f1", 0, 0)})
	a.nlm(t, nlm.ProcLock, &nlm.LockArgs{Lock: lk("node-a", 2, "f2", 0, 10)})
	b.nlm(t, nlm.ProcLock, &nlm.LockArgs{Lock: lk("node-b", 2, "f2", 0, 10)})
	spoof := dial(t, s.addr, "127.0.0.2")
	if err := spoof.call(nsm.Program, nsm.Version, nsm.ProcNotify, &nsm.StatChge{MonName: "node-a", State: 3}, nil); err != nil {
		t.Fatal(err)
	}
	if len(s.m.Held("f1")) != 1 {
		t.Fatal("SM_NOTIFY from another address released the locks")
	}
	if err := a.call(nsm.Program, nsm.Version, nsm.ProcNotify, &nsm.StatChge{MonName: "node-a", State: 3}, nil); err != nil {
		t.Fatal(err)
	}
	if len(s.m.Held("f1")) != 0 || len(s.m.Held("f2")) != 1 || s.m.Held("f2")[0].Owner.Caller != "node-b" {
		t.Fatalf("after SM_NOTIFY: %v %v", s.m.Held("f1"), s.m.Held("f2"))
	}
	// FREE_ALL releases the locks and the queued requests of a host
	a.nlm(t, nlm.ProcLock, &nlm.LockArgs{Exclusive: true, Lock: lk("node-a", 1, "f3", 0, 0)})
	if st := b.nlm(t, nlm.ProcLock, &nlm.LockArgs{Block: true, Exclusive: true, Lock: lk("node-b", 1, "f3", 0, 0)}); st != nlm.Blocked {
		t.Fatal(st)
	}
	if err := b.call(nlm.Program, nlm.Version, nlm.ProcFreeAll, &nlm.NotifyArgs{Name: "node-b", State: 5}, nil); err != nil {
		t.Fatal(err)
	}
	if s.m.Waiting("f3") != 0 || len(s.m.Held("f2")) != 0 || len(s.m.Held("f3")) != 1 {
		t.Fatalf("after FREE_ALL: waiting %d, f2 %v f3 %v", s.m.Waiting("f3"), s.m.Held("f2"), s.m.Held("f3"))
	}
}

// TestServiceRestartGraceReclaim: a server restarted on the same state
// directory bumps its NSM state by 2, sends SM_NOTIFY to the client
// recorded at its first LOCK, and in the grace period grants only
// reclaims; after the grace period a reclaim is DENIED_GRACE_PERIOD and
// other requests are served.
func TestServiceRestartGraceReclaim(t *testing.T) {
	dir := t.TempDir()
	p := newPeer(t)
	s1 := startManager(t, Options{StateDir: dir, LookupPort: p.lookup, GracePeriod: time.Hour})
	if s1.m.GraceRemaining() != 0 {
		t.Fatal("grace period on a first start")
	}
	st1 := s1.m.State()
	if st1%2 != 1 {
		t.Fatalf("state %d not odd", st1)
	}
	a := dial(t, s1.addr, "")
	la := lk("node-a", 7, "fh", 0, 0)
	a.nlm(t, nlm.ProcLock, &nlm.LockArgs{Exclusive: true, Lock: la})
	b, _ := os.ReadFile(filepath.Join(dir, "clients.json"))
	if !strings.Contains(string(b), `"node-a"`) || !strings.Contains(string(b), `"127.0.0.1"`) {
		t.Fatalf("client not recorded: %s", b)
	}
	s1.m.Close()

	s2 := startManager(t, Options{StateDir: dir, LookupPort: p.lookup, GracePeriod: time.Hour, Name: "server-1"})
	if s2.m.State() != st1+2 {
		t.Fatalf("state %d after restart from %d", s2.m.State(), st1)
	}
	p.wait(t, "SM_NOTIFY")
	if n := p.notifies(); len(n) != 1 || n[0].MonName != "server-1" || n[0].State != st1+2 {
		t.Fatalf("SM_NOTIFY: %+v", n)
	}
	if s2.m.GraceRemaining() <= 0 {
		t.Fatal("no grace period after a restart with recorded clients")
	}
	a2, c := dial(t, s2.addr, ""), dial(t, s2.addr, "")
	lc := lk("node-c", 1, "fh", 0, 1)
	for name, st := range map[string]nlm.Stat{
		"LOCK":   c.nlm(t, nlm.ProcLock, &nlm.LockArgs{Lock: lc}),
		"UNLOCK": c.nlm(t, nlm.ProcUnlock, &nlm.UnlockArgs{Lock: lc}),
		"CANCEL": c.nlm(t, nlm.ProcCancel, &nlm.CancArgs{Lock: lc}),
		"TEST":   c.test(t, &nlm.TestArgs{Lock: lc}).Stat,
	} {
		if st != nlm.DeniedGracePeriod {
			t.Errorf("%s in the grace period: %v", name, st)
		}
	}
	if st := a2.nlm(t, nlm.ProcLock, &nlm.LockArgs{Exclusive: true, Lock: la, Reclaim: true}); st != nlm.Granted {
		t.Fatalf("reclaim: %v", st)
	}
	s2.m.EndGrace()
	if st := c.nlm(t, nlm.ProcLock, &nlm.LockArgs{Lock: lc}); st != nlm.Denied {
		t.Fatalf("LOCK against the reclaimed lock: %v", st)
	}
	if st := c.nlm(t, nlm.ProcLock, &nlm.LockArgs{Lock: lc, Reclaim: true}); st != nlm.DeniedGracePeriod {
		t.Fatalf("reclaim after the grace period: %v", st)
	}
	testenv.Eventually(t, 10*time.Second, "the notified client to be forgotten then re-recorded", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "clients.json"))
		return strings.Contains(string(b), `"node-a"`) && strings.Contains(string(b), `"node-c"`)
	})
	s2.m.Close()
	b, _ = os.ReadFile(filepath.Join(dir, "state"))
	if strings.TrimSpace(string(b)) != strings.TrimSpace(itoa(st1+2)) {
		t.Fatalf("state file %q", b)
	}
}

func itoa(n int32) string { return strings.TrimSpace(strings.Repeat(" ", 0) + fmtInt(n)) }

func fmtInt(n int32) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int32) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}
