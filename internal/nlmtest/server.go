// Package nlmtest is a small NLM v4 lock server over TCP for tests of
// lock clients (X/Open XNFS chapter 10): TEST, LOCK (blocking requests
// queued and granted with a GRANTED callback), CANCEL, UNLOCK, a grace
// period that refuses all but reclaims, and a record of every call. It
// holds POSIX locks per file handle and owner (caller_name, svid).
package nlmtest

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/posixlock"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Server is a running NLM v4 service on 127.0.0.1.
type Server struct {
	Port int
	// CallbackAddr returns where GRANTED goes ("host:port"); "" sends none.
	CallbackAddr func() string

	mu      sync.Mutex
	files   map[string]*posixlock.Table
	svids   map[uint64]int32 // owner key -> svid
	blocked []*blocked
	grace   bool
	calls   []Call
	nextKey uint64
	keys    map[string]uint64 // caller/svid -> owner key
}

// Call is one call the server answered.
type Call struct {
	Proc    uint32
	Svid    int32
	Reclaim bool
	Block   bool
	Stat    nlm.Stat
}

type blocked struct {
	fh    string
	owner uint64
	args  nlm.LockArgs
}

// Start serves on a loopback port until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Port: ln.Addr().(*net.TCPAddr).Port, files: map[string]*posixlock.Table{}, svids: map[uint64]int32{}, keys: map[string]uint64{}}
	srv := sunrpc.NewServer(nil)
	procs := make([]sunrpc.Handler, nlm.ProcUnlock+1)
	procs[nlm.ProcTest] = s.test
	procs[nlm.ProcLock] = s.lock
	procs[nlm.ProcCancel] = s.cancel
	procs[nlm.ProcUnlock] = s.unlock
	srv.Register(nlm.Program, nlm.Version, procs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sunrpc.ServeTCP(ctx, ln, srv, sunrpc.TCPOptions{}) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// SetGrace starts (true) or ends the grace period: while it lasts, a LOCK
// that is not a reclaim, TEST, UNLOCK and CANCEL are refused with
// NLM4_DENIED_GRACE_PERIOD.
func (s *Server) SetGrace(on bool) {
	s.mu.Lock()
	s.grace = on
	s.mu.Unlock()
}

// Restart forgets every lock and blocked request (a server reboot) and
// starts the grace period.
func (s *Server) Restart() {
	s.mu.Lock()
	s.files = map[string]*posixlock.Table{}
	s.blocked = nil
	s.grace = true
	s.mu.Unlock()
}

// Calls returns the calls answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Locks returns the number of owners holding locks and of blocked requests.
func (s *Server) Locks() (holders, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.files {
		if !t.Empty() {
			holders++ // files with locks
		}
	}
	return holders, len(s.blocked)
}

// Held returns the locks svid holds, over all files.
func (s *Server) Held(svid int32) []posixlock.Range {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []posixlock.Range
	for k, v := range s.svids {
		if v != svid {
			continue
		}
		for _, t := range s.files {
			out = append(out, t.Ranges(k)...)
		}
	}
	return out
}

// HeldBy returns every lock held, by svid.
func (s *Server) HeldBy() map[int32][]posixlock.Range {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int32][]posixlock.Range{}
	for k, v := range s.svids {
		for _, t := range s.files {
			if r := t.Ranges(k); len(r) > 0 {
				out[v] = append(out[v], r...)
			}
		}
	}
	return out
}

func (s *Server) ownerLocked(l *nlm.Lock) uint64 {
	id := l.CallerName + "/" + strconv.Itoa(int(l.Svid))
	k, ok := s.keys[id]
	if !ok {
		s.nextKey++
		k = s.nextKey
		s.keys[id] = k
		s.svids[k] = l.Svid
	}
	return k
}

func (s *Server) tableLocked(fh []byte) *posixlock.Table {
	t := s.files[string(fh)]
	if t == nil {
		t = &posixlock.Table{}
		s.files[string(fh)] = t
	}
	return t
}

func rangeOf(l *nlm.Lock) (uint64, uint64) {
	if l.Length == 0 || l.Offset+l.Length-1 >= posixlock.MaxOffset {
		return l.Offset, posixlock.MaxOffset
	}
	return l.Offset, l.Offset + l.Length - 1
}

func reply(res *sunrpc.Builder, cookie []byte, st nlm.Stat) {
	r := nlm.Res{Cookie: cookie, Stat: st}
	r.Encode(&res.Encoder)
}

func (s *Server) record(c Call) { s.calls = append(s.calls, c) }

func (s *Server) test(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
	var a nlm.TestArgs
	if err := a.Decode(req.ArgsDecoder()); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := nlm.TestRes{Cookie: a.Cookie, Stat: nlm.Granted}
	if s.grace {
		r.Stat = nlm.DeniedGracePeriod
	} else {
		start, end := rangeOf(&a.Lock)
		if lr, holder, c := s.tableLocked(a.Lock.FH).Conflict(s.ownerLocked(&a.Lock), start, end, a.Exclusive); c {
			r.Stat = nlm.Denied
			r.Holder = &nlm.Holder{Exclusive: lr.Exclusive, Svid: s.svids[holder], Offset: lr.Start}
			if lr.End < posixlock.MaxOffset {
				r.Holder.Length = lr.End - lr.Start + 1
			}
		}
	}
	s.record(Call{Proc: nlm.ProcTest, Svid: a.Lock.Svid, Stat: r.Stat})
	r.Encode(&res.Encoder)
	return nil
}

func (s *Server) lock(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
	var a nlm.LockArgs
	if err := a.Decode(req.ArgsDecoder()); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Call{Proc: nlm.ProcLock, Svid: a.Lock.Svid, Reclaim: a.Reclaim, Block: a.Block}
	if s.grace && !a.Reclaim {
		c.Stat = nlm.DeniedGracePeriod
	} else {
		owner := s.ownerLocked(&a.Lock)
		start, end := rangeOf(&a.Lock)
		switch {
		case s.tableLocked(a.Lock.FH).TryLock(owner, start, end, a.Exclusive):
			c.Stat = nlm.Granted
			s.unblockLocked(string(a.Lock.FH), owner, &a.Lock)
		case a.Block:
			c.Stat = nlm.Blocked
			if !s.isBlockedLocked(string(a.Lock.FH), owner, &a.Lock) {
				s.blocked = append(s.blocked, &blocked{fh: string(a.Lock.FH), owner: owner, args: a})
			}
		default:
			c.Stat = nlm.Denied
		}
	}
	s.record(c)
	reply(res, a.Cookie, c.Stat)
	return nil
}

func (s *Server) isBlockedLocked(fh string, owner uint64, l *nlm.Lock) bool {
	for _, b := range s.blocked {
		if b.fh == fh && b.owner == owner && b.args.Lock.Offset == l.Offset && b.args.Lock.Length == l.Length {
			return true
		}
	}
	return false
}

func (s *Server) unblockLocked(fh string, owner uint64, l *nlm.Lock) bool {
	for i, b := range s.blocked {
		if b.fh == fh && b.owner == owner && b.args.Lock.Offset == l.Offset && b.args.Lock.Length == l.Length {
			s.blocked = append(s.blocked[:i], s.blocked[i+1:]...)
			return true
		}
	}
	return false
}

func (s *Server) cancel(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
	var a nlm.CancArgs
	if err := a.Decode(req.ArgsDecoder()); err != nil {
		return err
	}
	cookie, l := a.Cookie, a.Lock
	s.mu.Lock()
	defer s.mu.Unlock()
	st := nlm.Denied
	if s.grace {
		st = nlm.DeniedGracePeriod
	} else if s.unblockLocked(string(l.FH), s.ownerLocked(&l), &l) {
		st = nlm.Granted
	}
	s.record(Call{Proc: nlm.ProcCancel, Svid: l.Svid, Stat: st})
	reply(res, cookie, st)
	return nil
}

func (s *Server) unlock(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
	var a nlm.UnlockArgs
	if err := a.Decode(req.ArgsDecoder()); err != nil {
		return err
	}
	cookie, l := a.Cookie, a.Lock
	s.mu.Lock()
	defer s.mu.Unlock()
	st := nlm.Granted
	if s.grace {
		st = nlm.DeniedGracePeriod
	} else {
		start, end := rangeOf(&l)
		s.tableLocked(l.FH).Unlock(s.ownerLocked(&l), start, end)
		s.grantLocked()
	}
	s.record(Call{Proc: nlm.ProcUnlock, Svid: l.Svid, Stat: st})
	reply(res, cookie, st)
	return nil
}

// grantLocked grants the blocked requests that no longer conflict and
// calls each one's client back with GRANTED (in the background).
func (s *Server) grantLocked() {
	var keep []*blocked
	for _, b := range s.blocked {
		start, end := rangeOf(&b.args.Lock)
		if !s.tableLocked([]byte(b.fh)).TryLock(b.owner, start, end, b.args.Exclusive) {
			keep = append(keep, b)
			continue
		}
		if s.CallbackAddr != nil {
			if addr := s.CallbackAddr(); addr != "" {
				go s.granted(addr, b)
			}
		}
	}
	s.blocked = keep
}

// granted sends GRANTED; a client that answers NLM4_DENIED does not want
// the lock, which is then released.
func (s *Server) granted(addr string, b *blocked) {
	c, err := sunrpc.NewClient(sunrpc.TCPDialer(addr, sunrpc.TCPOptions{}), sunrpc.ClientOptions{Retry: sunrpc.RetryPolicy{Soft: true, Retries: 1}})
	if err != nil {
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a := nlm.TestArgs{Cookie: []byte("g"), Exclusive: b.args.Exclusive, Lock: b.args.Lock}
	var r nlm.Res
	err = c.Call(ctx, sunrpc.CallSpec{
		Prog: nlm.Program, Vers: nlm.Version, Proc: nlm.ProcGranted,
		Args:    func(bd *sunrpc.Builder) { a.Encode(&bd.Encoder) },
		Results: func(d *xdr.Decoder, _ int) error { return r.Decode(d) },
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(Call{Proc: nlm.ProcGranted, Svid: b.args.Lock.Svid, Stat: r.Stat})
	if err == nil && r.Stat == nlm.Denied {
		start, end := rangeOf(&b.args.Lock)
		s.tableLocked([]byte(b.fh)).Unlock(b.owner, start, end)
		s.grantLocked()
	}
}
