package lockd

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/rpctest"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// peer is a fake NFS client host: its NLM service (receiving GRANTED) and
// NSM service (receiving SM_NOTIFY), each on its own port, found by the
// server through lookup.
type peer struct {
	nlmAddr, nsmAddr string

	mu       sync.Mutex
	granted  []nlm.TestArgs
	notified []nsm.StatChge
	answer   nlm.Stat // what GRANTED answers
	down     bool     // lookup fails: the client cannot be reached
	refused  int      // lookups that failed because down was set
	ch       chan struct{}
}

func newPeer(t *testing.T) *peer {
	p := &peer{ch: make(chan struct{}, 16)}
	s := sunrpc.NewServer(nil)
	procs := make([]sunrpc.Handler, nlm.NumProcs)
	procs[nlm.ProcGranted] = func(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
		var a nlm.TestArgs
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return err
		}
		p.mu.Lock()
		p.granted = append(p.granted, a)
		r := nlm.Res{Cookie: a.Cookie, Stat: p.answer}
		p.mu.Unlock()
		r.Encode(&b.Encoder)
		p.ch <- struct{}{}
		return nil
	}
	s.Register(nlm.Program, nlm.Version, procs)
	p.nlmAddr = rpctest.Serve(t, s)
	s2 := sunrpc.NewServer(nil)
	nprocs := make([]sunrpc.Handler, nsm.NumProcs)
	nprocs[nsm.ProcNotify] = func(_ context.Context, req *sunrpc.Request, _ *sunrpc.Builder) error {
		var a nsm.StatChge
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return err
		}
		p.mu.Lock()
		p.notified = append(p.notified, a)
		p.mu.Unlock()
		p.ch <- struct{}{}
		return nil
	}
	s2.Register(nsm.Program, nsm.Version, nprocs)
	p.nsmAddr = rpctest.Serve(t, s2)
	return p
}

// refusedLookups is how many lookups failed while the peer was down.
func (p *peer) refusedLookups() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// lookup is the Manager's LookupPort for p: the host must be 127.0.0.1.
func (p *peer) lookup(_ context.Context, host string, prog, vers uint32) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		p.refused++
		return 0, errors.New("test: client unreachable")
	}
	if host != "127.0.0.1" {
		return 0, errors.New("test: unexpected host " + host)
	}
	switch {
	case prog == nlm.Program && vers == nlm.Version:
		return portOf(p.nlmAddr), nil
	case prog == nsm.Program && vers == nsm.Version:
		return portOf(p.nsmAddr), nil
	}
	return 0, nil
}

func (p *peer) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

// wait waits for a GRANTED or SM_NOTIFY to arrive.
func (p *peer) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-p.ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s received", what)
	}
}

func (p *peer) grants() []nlm.TestArgs {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]nlm.TestArgs(nil), p.granted...)
}

func (p *peer) notifies() []nsm.StatChge {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]nsm.StatChge(nil), p.notified...)
}

// lockServer runs a Manager's NLM and NSM services on loopback TCP.
type lockServer struct {
	m    *Manager
	addr string
}

func startManager(t *testing.T, opts Options) *lockServer {
	t.Helper()
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s := sunrpc.NewServer(nil)
	s.Register(nlm.Program, nlm.Version, m.NLMHandlers())
	s.Register(nsm.Program, nsm.Version, m.NSMHandlers())
	ls := &lockServer{m: m, addr: rpctest.Serve(t, s)}
	m.Start()
	t.Cleanup(func() { m.Close() })
	return ls
}

// rpc is a test client of a lockServer, dialing from local address from
// ("" for any).
type rpc struct {
	c *sunrpc.Client
}

func dial(t *testing.T, addr, from string) *rpc {
	t.Helper()
	d := func(ctx context.Context) (sunrpc.ClientTransport, error) {
		var nd net.Dialer
		if from != "" {
			nd.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
		}
		conn, err := nd.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return sunrpc.NewTCPTransport(conn, sunrpc.TCPOptions{}), nil
	}
	c, err := sunrpc.NewClient(d, sunrpc.ClientOptions{Retry: sunrpc.RetryPolicy{Soft: true, Retries: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rpc{c: c}
}

// call makes procedure proc of prog/vers with args (nil: void) and
// decodes the result into res (nil: void).
func (r *rpc) call(prog, vers, proc uint32, args, res interface {
	Encode(*xdr.Encoder)
	Decode(*xdr.Decoder) error
}) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spec := sunrpc.CallSpec{Prog: prog, Vers: vers, Proc: proc, MaxReplySize: 8192}
	if args != nil {
		spec.Args = func(b *sunrpc.Builder) { args.Encode(&b.Encoder) }
	}
	if res != nil {
		spec.Results = func(d *xdr.Decoder, _ int) error { return res.Decode(d) }
	}
	return r.c.Call(ctx, spec)
}

func (r *rpc) nlm(t *testing.T, proc uint32, args nlm.Message) nlm.Stat {
	t.Helper()
	var res nlm.Res
	if err := r.call(nlm.Program, nlm.Version, proc, args, &res); err != nil {
		t.Fatalf("%s: %v", nlm.ProcName(proc), err)
	}
	return res.Stat
}

func (r *rpc) test(t *testing.T, a *nlm.TestArgs) nlm.TestRes {
	t.Helper()
	var res nlm.TestRes
	if err := r.call(nlm.Program, nlm.Version, nlm.ProcTest, a, &res); err != nil {
		t.Fatalf("TEST: %v", err)
	}
	if string(res.Cookie) != string(a.Cookie) {
		t.Fatalf("TEST cookie %x, sent %x", res.Cookie, a.Cookie)
	}
	return res
}

// lk is an nlm4_lock of caller's process svid on fh.
func lk(caller string, svid int32, fh string, off, n uint64) nlm.Lock {
	return nlm.Lock{CallerName: caller, FH: []byte(fh), OH: []byte(strconv.Itoa(int(svid)) + "@" + caller), Svid: svid, Offset: off, Length: n}
}
