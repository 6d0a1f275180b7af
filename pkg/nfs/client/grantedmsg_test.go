package client

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/lockdtest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/rpctest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// grantedRes returns the GRANTED_RES that srv received with cookie.
func grantedRes(srv *lockdtest.Server, cookie []byte) (lockdtest.Call, bool) {
	for _, c := range srv.Calls() {
		if c.Proc == nlm.ProcGrantedRes && bytes.Equal(c.Cookie, cookie) {
			return c, true
		}
	}
	return lockdtest.Call{}, false
}

// TestCallbackGrantedMsg: a GRANTED_MSG (the message form of GRANTED that
// Linux's lockd sends) completes the blocked LOCK it names, and the
// client answers it with a GRANTED_RES call to the server's NLM service
// carrying the callback's cookie and NLM4_GRANTED; a GRANTED_MSG that
// names no waiting LOCK is answered NLM4_DENIED, so that the server
// releases the lock.
func TestCallbackGrantedMsg(t *testing.T) {
	srv := startNLM(t)
	// the server blocks every LOCK: only the GRANTED_MSG below ends the wait
	locks := make(chan nlm.Lock, 8)
	srv.Answer = func(proc uint32, l *nlm.Lock) (nlm.Stat, bool) {
		if proc != nlm.ProcLock {
			return 0, false
		}
		locks <- *l
		return nlm.Blocked, true
	}
	l := newTestLocker(t, srv, "host-a", LockOptions{})
	ctx := testenv.Context(t, 20*time.Second)
	got := lockAsync(ctx, l, req(1, 1001, 10, 19, true))
	var lk nlm.Lock
	select {
	case lk = <-locks:
	case <-time.After(5 * time.Second):
		t.Fatal("no LOCK reached the server")
	}
	c, err := sunrpc.NewClient(sunrpc.TCPDialer("127.0.0.1:"+strconv.Itoa(CallbackPort()), sunrpc.TCPOptions{}), sunrpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(g nlm.TestArgs) {
		t.Helper()
		if err := c.Call(ctx, sunrpc.CallSpec{Prog: nlm.Program, Vers: nlm.Version, Proc: nlm.ProcGrantedMsg,
			Args: func(b *sunrpc.Builder) { g.Encode(&b.Encoder) }}); err != nil {
			t.Fatal("GRANTED_MSG:", err)
		}
	}
	grantRes := func(want nlm.Stat, cookie []byte) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, "GRANTED_RES "+string(cookie), func() bool { _, ok := grantedRes(srv, cookie); return ok })
		if r, _ := grantedRes(srv, cookie); r.Stat != want {
			t.Fatalf("GRANTED_RES %+v, want stat %d", r, want)
		}
	}
	send(nlm.TestArgs{Cookie: []byte("grant-1"), Exclusive: true, Lock: lk})
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("GRANTED_MSG did not complete the blocked LOCK")
	}
	grantRes(nlm.Granted, []byte("grant-1"))
	if st := l.Stats(); st.Callbacks != 1 {
		t.Fatalf("stats %+v: want the GRANTED_MSG to complete the wait", st)
	}
	if h := l.Held(); len(h) != 1 || h[0].Start != 10 || h[0].End != 19 {
		t.Fatalf("held %+v", h)
	}
	other := lk
	other.Offset = 500
	send(nlm.TestArgs{Cookie: []byte("grant-2"), Exclusive: true, Lock: other})
	grantRes(nlm.Denied, []byte("grant-2"))
}

// fakeRPCBind is a portmap v2 service (SET, UNSET, GETPORT over TCP)
// keeping its mappings in memory, by program and version.
type fakeRPCBind struct {
	mu   sync.Mutex
	maps map[[2]uint32]uint32
	addr string
}

func startFakeRPCBind(t *testing.T) *fakeRPCBind {
	t.Helper()
	f := &fakeRPCBind{maps: map[[2]uint32]uint32{}}
	mapping := func(req *sunrpc.Request) (k [2]uint32, port uint32) {
		d := req.ArgsDecoder()
		k[0], k[1] = d.Uint32(), d.Uint32()
		_ = d.Uint32() // prot
		return k, d.Uint32()
	}
	procs := make([]sunrpc.Handler, sunrpc.PortmapProcGetPort+1)
	procs[sunrpc.PortmapProcSet] = func(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		k, port := mapping(req)
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, taken := f.maps[k]; taken {
			res.Uint32(0)
			return nil
		}
		f.maps[k] = port
		res.Uint32(1)
		return nil
	}
	procs[sunrpc.PortmapProcUnset] = func(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		k, _ := mapping(req)
		f.mu.Lock()
		defer f.mu.Unlock()
		_, had := f.maps[k]
		delete(f.maps, k)
		res.Uint32(map[bool]uint32{false: 0, true: 1}[had])
		return nil
	}
	procs[sunrpc.PortmapProcGetPort] = func(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		k, _ := mapping(req)
		f.mu.Lock()
		defer f.mu.Unlock()
		res.Uint32(f.maps[k])
		return nil
	}
	srv := sunrpc.NewServer(nil)
	srv.Register(sunrpc.PortmapProgram, sunrpc.PortmapVersion, procs)
	addr := rpctest.Serve(t, srv)
	f.addr = addr
	return f
}

// mappings returns a copy of the mappings.
func (f *fakeRPCBind) mappings() map[[2]uint32]uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[[2]uint32]uint32, len(f.maps))
	for k, v := range f.maps {
		m[k] = v
	}
	return m
}

func (f *fakeRPCBind) port(prog, vers uint32) uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maps[[2]uint32{prog, vers}]
}

// TestCallbackUnregister: the callback service registers NLM and NSM
// with the local rpcbind when it starts and removes its registrations
// when its last Locker closes, but leaves alone a registration that
// another service made meanwhile (portmap's UNSET would remove it
// whatever its port).
func TestCallbackUnregister(t *testing.T) {
	rb := startFakeRPCBind(t)
	old := CallbackRPCBind
	CallbackRPCBind = rb.addr
	t.Cleanup(func() { CallbackRPCBind = old })
	srv := startNLM(t)
	run := func(replace bool) {
		l := newTestLocker(t, srv, "host-a", LockOptions{})
		if err := l.Lock(testenv.Context(t, 5*time.Second), req(1, 1001, 0, 0, true), false); err != nil {
			t.Fatal(err)
		}
		p := uint32(CallbackPort())
		if rb.port(nlm.Program, nlm.Version) != p || rb.port(nsm.Program, nsm.Version) != p {
			t.Fatalf("registrations %v, want both at the callback port %d", rb.mappings(), p)
		}
		if replace { // another service takes NLM over
			rb.mu.Lock()
			rb.maps[[2]uint32{nlm.Program, nlm.Version}] = 9999
			rb.mu.Unlock()
		}
		if err := l.Close(testenv.Context(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if CallbackPort() != 0 {
			t.Fatal("callback service still running after its last Locker closed")
		}
	}
	run(false)
	if m := rb.mappings(); len(m) != 0 {
		t.Fatalf("registrations left after the service stopped: %v", m)
	}
	run(true)
	if p := rb.port(nlm.Program, nlm.Version); p != 9999 {
		t.Fatalf("the other service's NLM registration became %d", p)
	}
	if p := rb.port(nsm.Program, nsm.Version); p != 0 {
		t.Fatalf("the service's own NSM registration left: %d", p)
	}
}
