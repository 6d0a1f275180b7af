// Package lockdtest serves the export server's lock manager
// (pkg/nfs/lockd: NLM v4 and NSM v1, X/Open XNFS chapters 10 and 11) on
// a loopback TCP port
// for tests of lock clients, with a record of the calls it answered,
// restarts that keep its state directory (a grace period follows), and a
// hook that answers a call in its place.
package lockdtest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/posixlock"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockd"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Server is a lockd.Manager serving NLM v4 on 127.0.0.1:Port.
type Server struct {
	Port int
	// CallbackPort returns the port of the clients' NLM service, where
	// GRANTED goes; nil or 0: the callback fails, and the manager offers
	// the lock again only after a minute (a lost GRANTED).
	CallbackPort func() int
	// Answer, when set, is asked first about each TEST, LOCK, CANCEL and
	// UNLOCK: with ok it is answered stat without the manager seeing it.
	Answer func(proc uint32, l *nlm.Lock) (stat nlm.Stat, ok bool)
	// Notify: the clients' NSM service is at CallbackPort too, so a
	// restarted manager sends them SM_NOTIFY itself (from its state
	// directory); otherwise it cannot reach them and the test notifies.
	Notify bool
	// Grace is the grace period after Restart; 0: an hour (until
	// EndGrace).
	Grace time.Duration

	t   testing.TB
	dir string // the manager's state directory

	mu    sync.Mutex
	m     *lockd.Manager
	keys  map[string]bool // files locked or tested
	calls []Call
	stop  func()
}

// Call is one call the server answered: its procedure, the lock's svid,
// the reclaim and block flags of a LOCK, the call's cookie, and the
// status answered; for a GRANTED_RES (a client's result of a GRANTED_MSG)
// the cookie and status it carries.
type Call struct {
	Proc    uint32
	Svid    int32
	Reclaim bool
	Block   bool
	Cookie  []byte
	Stat    nlm.Stat
}

// Start serves on a loopback port until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), keys: map[string]bool{}}
	s.start("127.0.0.1:0", 0)
	t.Cleanup(func() { s.stopNow() })
	return s
}

// Restart stops the manager, forgetting every lock and blocked request
// (a server crash), and starts another on the same port and state
// directory: it is in its grace period (Grace, an hour by default, or
// until EndGrace) when clients had locked. It sends SM_NOTIFY only with
// Notify set; otherwise the test does.
func (s *Server) Restart() {
	s.t.Helper()
	s.stopNow()
	grace := s.Grace
	if grace <= 0 {
		grace = time.Hour
	}
	s.start("127.0.0.1:"+strconv.Itoa(s.Port), grace)
}

// EndGrace ends the grace period.
func (s *Server) EndGrace() { s.manager().EndGrace() }

// GraceRemaining returns how long the grace period lasts still (0 when
// not in one).
func (s *Server) GraceRemaining() time.Duration { return s.manager().GraceRemaining() }

func (s *Server) manager() *lockd.Manager {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m
}

func (s *Server) stopNow() {
	s.mu.Lock()
	stop := s.stop
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (s *Server) start(addr string, grace time.Duration) {
	m, err := lockd.New(lockd.Options{
		StateDir:      s.dir,
		GracePeriod:   grace,
		RetryInterval: time.Minute,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		FileKey: func(fh []byte, _ *sunrpc.Request) (string, nlm.Stat) {
			s.mu.Lock()
			s.keys[string(fh)] = true
			s.mu.Unlock()
			return string(fh), nlm.Granted
		},
		LookupPort: func(_ context.Context, _ string, prog, _ uint32) (int, error) {
			if (prog == nlm.Program || prog == nsm.Program && s.Notify) && s.CallbackPort != nil {
				if p := s.CallbackPort(); p != 0 {
					return p, nil
				}
			}
			return 0, errors.New("lockdtest: no callback service")
		},
	})
	if err != nil {
		s.t.Fatal(err)
	}
	procs := m.NLMHandlers()
	for _, p := range []uint32{nlm.ProcTest, nlm.ProcLock, nlm.ProcCancel, nlm.ProcUnlock} {
		procs[p] = s.observe(p, procs[p])
	}
	procs[nlm.ProcGrantedRes] = s.observeGrantedRes(procs[nlm.ProcGrantedRes])
	srv := sunrpc.NewServer(nil)
	srv.Register(nlm.Program, nlm.Version, procs)
	srv.Register(nsm.Program, nsm.Version, m.NSMHandlers())
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		m.Close()
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sunrpc.ServeTCP(ctx, ln, srv, sunrpc.TCPOptions{}) }()
	m.Start()
	s.mu.Lock()
	s.Port, s.m = ln.Addr().(*net.TCPAddr).Port, m
	s.stop = func() { cancel(); <-done; m.Close() }
	s.mu.Unlock()
}

// observe records the calls of procedure proc answered by h, or answers
// them with s.Answer.
func (s *Server) observe(proc uint32, h sunrpc.Handler) sunrpc.Handler {
	return func(ctx context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
		c := Call{Proc: proc}
		var l nlm.Lock
		var cookie []byte
		d := xdr.NewDecoder(req.Args)
		var err error
		switch proc {
		case nlm.ProcTest:
			var a nlm.TestArgs
			err = a.Decode(d)
			cookie, l = a.Cookie, a.Lock
		case nlm.ProcLock:
			var a nlm.LockArgs
			err = a.Decode(d)
			cookie, l, c.Reclaim, c.Block = a.Cookie, a.Lock, a.Reclaim, a.Block
		case nlm.ProcCancel:
			var a nlm.CancArgs
			err = a.Decode(d)
			cookie, l = a.Cookie, a.Lock
		case nlm.ProcUnlock:
			var a nlm.UnlockArgs
			err = a.Decode(d)
			cookie, l = a.Cookie, a.Lock
		}
		if err != nil {
			return h(ctx, req, b) // the manager's GARBAGE_ARGS
		}
		c.Svid, c.Cookie = l.Svid, bytes.Clone(cookie)
		if s.Answer != nil {
			if st, ok := s.Answer(proc, &l); ok {
				r := nlm.Res{Cookie: cookie, Stat: st}
				r.Encode(&b.Encoder)
				s.record(c, st)
				return nil
			}
		}
		n := b.Len()
		if err := h(ctx, req, b); err != nil {
			return err
		}
		var r nlm.Res // TEST's result starts as every other's: cookie, stat
		if err := r.Decode(xdr.NewDecoder(b.Bytes()[n:])); err == nil {
			s.record(c, r.Stat)
		}
		return nil
	}
}

// observeGrantedRes records the GRANTED_RES messages handled by h.
func (s *Server) observeGrantedRes(h sunrpc.Handler) sunrpc.Handler {
	return func(ctx context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
		var r nlm.Res
		if err := r.Decode(xdr.NewDecoder(req.Args)); err == nil {
			s.record(Call{Proc: nlm.ProcGrantedRes, Cookie: bytes.Clone(r.Cookie)}, r.Stat)
		}
		return h(ctx, req, b)
	}
}

func (s *Server) record(c Call, st nlm.Stat) {
	c.Stat = st
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

// Calls returns the TEST, LOCK, CANCEL, UNLOCK and GRANTED_RES calls
// answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// fileKeys returns the files locked or tested so far.
func (s *Server) fileKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.keys))
}

// Locks returns the number of files with locks held, and of queued
// requests (granted ones included until the client acknowledges them).
func (s *Server) Locks() (holders, waiting int) {
	m := s.manager()
	for _, k := range s.fileKeys() {
		if len(m.Held(k)) > 0 {
			holders++
		}
		waiting += m.Waiting(k)
	}
	return holders, waiting
}

// HeldBy returns every lock held, by svid, sorted by Start.
func (s *Server) HeldBy() map[int32][]posixlock.Range {
	m := s.manager()
	out := map[int32][]posixlock.Range{}
	for _, k := range s.fileKeys() {
		for _, h := range m.Held(k) {
			out[h.Owner.Svid] = append(out[h.Owner.Svid], posixlock.Range{Start: h.Range.Start, End: h.Range.End, Exclusive: h.Exclusive})
		}
	}
	for _, rs := range out {
		slices.SortFunc(rs, func(a, b posixlock.Range) int { return cmp.Compare(a.Start, b.Start) })
	}
	return out
}

// Held returns the locks svid holds, over all files, sorted by Start.
func (s *Server) Held(svid int32) []posixlock.Range { return s.HeldBy()[svid] }
