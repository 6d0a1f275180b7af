package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/internal/posixlock"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsmstate"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Lock defaults.
const (
	// DefaultLockPoll is how long a blocked LOCK waits for the server's
	// GRANTED callback before it is sent again, 1 s. Linux re-sends after
	// NLMCLNT_POLL_TIMEOUT (30 s); we re-send sooner because the callback
	// may not reach us at all (a firewall, a server that cannot reach the
	// node, a mount process run alone beside another one holding the
	// node's NLM registration), and then the re-sent LOCK is what
	// completes the wait.
	DefaultLockPoll = time.Second
	// DefaultGraceRetry is the pause before a call answered with
	// NLM4_DENIED_GRACE_PERIOD is sent again, 5 s (Linux
	// NLMCLNT_GRACE_WAIT).
	DefaultGraceRetry = 5 * time.Second
	// MaxLockOffset is the largest lock offset, 2^63-1 (Linux
	// OFFSET_MAX); a lock that ends there extends to the end of the file.
	MaxLockOffset = posixlock.MaxOffset
)

// Lock errors: an NLM status other than NLM4_GRANTED (X/Open XNFS
// chapter 10, nlm4_stats), or the lock service failing. Each error of a
// lock call wraps one of these.
var (
	// ErrLockDenied: another owner holds a conflicting lock
	// (NLM4_DENIED; EAGAIN).
	ErrLockDenied = errors.New("lock denied: conflicting lock")
	// ErrNoLocks: the server has no resources for the lock, is in its
	// grace period for a reclaim, or failed (NLM4_DENIED_NOLOCKS,
	// NLM4_FAILED, NLM4_DENIED_GRACE_PERIOD on a reclaim; ENOLCK).
	ErrNoLocks = errors.New("no locks available")
	// ErrDeadlock: the wait would deadlock (NLM4_DEADLCK; EDEADLK).
	ErrDeadlock = errors.New("lock would deadlock")
	// ErrLockROFS: the file system is read-only (NLM4_ROFS; EROFS).
	ErrLockROFS = errors.New("lock on a read-only file system")
	// ErrLockStale: the file handle is stale (NLM4_STALE_FH; ESTALE).
	ErrLockStale = errors.New("lock on a stale file handle")
	// ErrLockRange: the range is past what the server supports
	// (NLM4_FBIG; EOVERFLOW).
	ErrLockRange = errors.New("lock range too large")
	// ErrLockService: the NLM service could not be found or called
	// (rpcbind, connection, RPC error; ENOLCK).
	ErrLockService = errors.New("lock service unavailable")
	// ErrLockInterrupted: the wait for a blocked lock ended with its
	// context; the blocked request was cancelled (EINTR).
	ErrLockInterrupted = errors.New("lock wait interrupted")
)

// statErr returns the error of NLM status st (nil for NLM4_GRANTED).
func statErr(st nlm.Stat) error {
	var base error
	switch st {
	case nlm.Granted:
		return nil
	case nlm.Denied:
		base = ErrLockDenied
	case nlm.Deadlck:
		base = ErrDeadlock
	case nlm.ROFS:
		base = ErrLockROFS
	case nlm.StaleFH:
		base = ErrLockStale
	case nlm.FBig:
		base = ErrLockRange
	default: // DeniedNoLocks, Failed, Blocked where unexpected, grace on reclaim, unknown
		base = ErrNoLocks
	}
	return fmt.Errorf("%w (nlm4_stats %d)", base, uint32(st))
}

// LockOptions configure a Client's NLM v4 client (X/Open XNFS chapter 10,
// over TCP as RFC 8267 section 5.1 asks).
type LockOptions struct {
	// Port is the TCP port of the server's NLM v4 service (nfs(5)
	// lockport); 0 asks the server's rpcbind.
	Port int
	// CallerName is caller_name of every lock (the host the server
	// monitors with NSM and frees the locks of when it reboots), at most
	// 1024 bytes; "" means the host name.
	CallerName string
	// Poll is how long a blocked LOCK waits for GRANTED before it is sent
	// again; 0 means DefaultLockPoll.
	Poll time.Duration
	// GraceRetry is the pause before a call refused for the server's
	// grace period is sent again; 0 means DefaultGraceRetry.
	GraceRetry time.Duration
	// State is this host's NSM state (its reboot counter and the servers
	// to notify after a reboot); nil means one kept in memory.
	State *HostState
	// NoCallbacks keeps the process-wide callback service (GRANTED,
	// SM_NOTIFY) from starting: blocked locks then complete by polling.
	NoCallbacks bool
}

// LockRequest names a lock: a byte range of a file, of one owner.
type LockRequest struct {
	FH nfs3.FH
	// Owner is the consumer's lock owner (FUSE lock_owner: the open-file
	// table for POSIX locks, the open file for flock). Each owner gets
	// its own svid and oh on the wire, as Linux lockd's nlm_lockowner.
	Owner uint64
	// Pid is the process asking (0: unknown). The svid of a new owner is
	// its pid when no other owner of this Locker uses it, so that F_GETLK
	// elsewhere on this host reports the holder's pid; else a number from
	// this process's random range.
	Pid uint32
	// Start..End is the range, inclusive; End >= MaxLockOffset extends to
	// the end of the file.
	Start, End uint64
	// Exclusive asks for a write lock; false for a read (shared) lock.
	Exclusive bool
}

// LockHolder is a conflicting lock reported by TEST (nlm4_holder).
type LockHolder struct {
	Exclusive  bool
	Svid       int32 // the holder's svid: a pid on its host for Linux and this client
	Start, End uint64
}

// HeldLock is one range this Locker holds.
type HeldLock struct {
	FH         nfs3.FH
	Owner      uint64
	Svid       int32
	Start, End uint64
	Exclusive  bool
}

// lockOwner is one owner's wire identity.
type lockOwner struct {
	id   uint64
	svid int32
	oh   []byte
	refs int // held files and calls in progress
}

type heldKey struct {
	fh    nfs3.FH
	owner uint64
}

type heldFile struct {
	fh    nfs3.FH
	owner *lockOwner
	set   posixlock.Set
}

// waiter is a blocked LOCK waiting for GRANTED.
type waiter struct {
	fh             string
	svid           int32
	offset, length uint64
	granted        chan struct{} // closed by GRANTED from the server's address
	// wake is signalled by a GRANTED that names this lock but comes from another
	// address than the one the mount reaches the server at (a Service address the
	// cluster translates, NAT): the waiter re-sends its LOCK at once, and only the
	// server's answer on the mount's own connection completes it.
	wake    chan struct{}
	wokenBy string // the address of the GRANTED that woke it (guarded by Locker.mu)
	done    bool   // granted already (guarded by Locker.mu)
}

// names reports whether a GRANTED's lock is w's: same svid, file handle and range.
func (w *waiter) names(a *nlm.TestArgs) bool {
	return w.svid == a.Lock.Svid && w.fh == string(a.Lock.FH) && w.offset == a.Lock.Offset && w.length == a.Lock.Length
}

// Locker is the NLM v4 client of one mount: it locks byte ranges of the
// mount's files on the server (TEST, LOCK, CANCEL, UNLOCK), maps lock
// owners to svid and oh, completes blocked locks on GRANTED or by
// re-sending them, remembers what it holds to reclaim it after the
// server restarts (NSM SM_NOTIFY) and to release it at Close. It is safe
// for concurrent use.
type Locker struct {
	srv  Options // the server's address and how to call it; Lock is opts
	opts LockOptions

	// rw is taken shared by every call and exclusively by a reclaim, so
	// that no lock changes while the held locks are sent again (Linux
	// nlm_host.h_rwsem).
	rw sync.RWMutex

	mu       sync.Mutex
	rpc      *sunrpc.Client
	serverIP net.IP
	owners   map[uint64]*lockOwner
	bySvid   map[int32]*lockOwner
	held     map[heldKey]*heldFile
	waiters  map[*waiter]struct{}
	nextSvid uint32
	onCB     bool // registered with the callback service
	closed   bool

	cookie    atomic.Uint64
	reclaims  atomic.Uint64
	callbacks atomic.Uint64 // GRANTED callbacks that completed a wait
	retries   atomic.Uint64 // re-sent LOCKs that completed a wait
	hostname  string
}

// NewLocker returns the NLM client for the server of o (Server,
// RPCBindPort, TCP, AuthSys, Retry and Lock are used); Mount and New make
// one for each Client. It connects at its first call.
func NewLocker(so Options) *Locker {
	o := so.Lock
	if o.Poll <= 0 {
		o.Poll = DefaultLockPoll
	}
	if o.GraceRetry <= 0 {
		o.GraceRetry = DefaultGraceRetry
	}
	host, _ := os.Hostname()
	if o.CallerName == "" {
		o.CallerName = host
	}
	return &Locker{
		srv: so, opts: o, hostname: host,
		owners: map[uint64]*lockOwner{}, bySvid: map[int32]*lockOwner{},
		held: map[heldKey]*heldFile{}, waiters: map[*waiter]struct{}{},
		// svids not taken from a pid count down from a random point of
		// the negative half, which no pid reaches
		nextSvid: 1<<31 | rand.Uint32N(1<<30),
	}
}

// Locks returns the mount's NLM client. It connects at its first call.
func (c *Client) Locks() *Locker { return c.locks }

// Stats of a Locker.
type LockStats struct {
	Reclaims  uint64 // reclaims of the held locks (server restarts seen)
	Callbacks uint64 // blocked locks completed by a GRANTED callback
	Retries   uint64 // blocked locks completed by a re-sent LOCK
}

// Stats returns the Locker's counters.
func (l *Locker) Stats() LockStats {
	return LockStats{Reclaims: l.reclaims.Load(), Callbacks: l.callbacks.Load(), Retries: l.retries.Load()}
}

// CallerName returns the caller_name of the Locker's locks.
func (l *Locker) CallerName() string { return l.opts.CallerName }

// client returns the RPC client of the server's NLM service, resolving
// its port through rpcbind at the first call, and joins the callback
// service then.
func (l *Locker) client(ctx context.Context) (*sunrpc.Client, error) {
	rpc, join, err := l.connect(ctx)
	if join {
		callbacks.add(l) // without l.mu: it reads the Lockers' servers
	}
	return rpc, err
}

// connect is client without joining the callback service: join says
// that it should.
func (l *Locker) connect(ctx context.Context) (rpc *sunrpc.Client, join bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, false, fmt.Errorf("%w: unmounted", ErrLockService)
	}
	if l.rpc != nil {
		return l.rpc, false, nil
	}
	o := &l.srv
	if o.Server == "" {
		return nil, false, fmt.Errorf("%w: no server address", ErrLockService)
	}
	port := l.opts.Port
	if port == 0 {
		rb := o.RPCBindPort
		if rb == 0 {
			rb = PortmapPort
		}
		p, err := GetPort(ctx, hostPort(o.Server, rb), nlm.Program, nlm.Version, o.plainTCP())
		if err != nil {
			return nil, false, fmt.Errorf("%w: %w", ErrLockService, err)
		}
		port = p
	}
	cred := o.AuthSys
	rpc, err = sunrpc.NewClient(sunrpc.TCPDialer(hostPort(o.Server, port), o.tcpFor(nlm.Program, nlm.Version)), sunrpc.ClientOptions{AuthSys: &cred, Retry: o.Retry})
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrLockService, err)
	}
	if ips, err := net.DefaultResolver.LookupIP(ctx, "ip", o.Server); err == nil && len(ips) > 0 {
		l.serverIP = ips[0]
	}
	l.rpc = rpc
	if !l.opts.NoCallbacks && !l.onCB {
		l.onCB = true
		join = true
	}
	klog.V(1).InfoS("NLM client ready", "server", o.Server, "port", port, "callerName", l.opts.CallerName)
	return rpc, join, nil
}

// owner returns the wire identity of owner id, creating it, with one
// more reference (put drops it).
func (l *Locker) owner(id uint64, pid uint32) *lockOwner {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.owners[id]
	if o == nil {
		o = &lockOwner{id: id}
		if s := int32(pid); pid != 0 && s > 0 && l.bySvid[s] == nil {
			o.svid = s
		} else {
			for {
				s := int32(l.nextSvid)
				l.nextSvid--
				if l.nextSvid < 1<<31 {
					l.nextSvid = 1<<32 - 1
				}
				if l.bySvid[s] == nil {
					o.svid = s
					break
				}
			}
		}
		// "svid@host", as Linux's nlmclnt_setlockargs forms oh; the
		// process id keeps owners of two processes on one host apart
		// for servers that compare oh
		o.oh = []byte(strconv.FormatInt(int64(o.svid), 10) + "@" + l.hostname + "/" + ownerTag)
		l.owners[id] = o
		l.bySvid[o.svid] = o
	}
	o.refs++
	return o
}

func (l *Locker) put(o *lockOwner) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.putLocked(o)
}

func (l *Locker) putLocked(o *lockOwner) {
	o.refs--
	if o.refs == 0 {
		delete(l.owners, o.id)
		delete(l.bySvid, o.svid)
	}
}

// nlmLock is the wire lock of r for owner o.
func (l *Locker) nlmLock(fh nfs3.FH, o *lockOwner, start, end uint64) nlm.Lock {
	off, n := nlmRange(start, end)
	return nlm.Lock{CallerName: l.opts.CallerName, FH: fh.Bytes(), OH: o.oh, Svid: o.svid, Offset: off, Length: n}
}

// nlmRange converts an inclusive range (End >= MaxLockOffset: to the end
// of the file) to nlm4 l_offset and l_len (0: to the end), as Linux's
// nlm4_compute_offsets.
func nlmRange(start, end uint64) (offset, length uint64) {
	if end >= MaxLockOffset {
		return start, 0
	}
	return start, end - start + 1
}

// lockRange converts nlm4 l_offset and l_len back to an inclusive range,
// an overflowing one extending to the end of the file.
func lockRange(offset, length uint64) (start, end uint64) {
	start = min(offset, MaxLockOffset)
	if length == 0 || offset+length-1 < offset || offset+length-1 >= MaxLockOffset {
		return start, MaxLockOffset
	}
	return start, offset + length - 1
}

func (l *Locker) newCookie() []byte {
	return binary.BigEndian.AppendUint64(nil, l.cookie.Add(1))
}

// lockCallTimeout bounds a LOCK call whose caller's context ended.
const lockCallTimeout = time.Minute

// maxNLMReply bounds an NLM reply: cookie, status, a holder with its oh.
const maxNLMReply = replyHeaderMax + 4 + nlm.MaxNetobjSize + 4 + 4 + 4 + 4 + nlm.MaxNetobjSize + 16

// GraceWait is what a consumer is told of a lock call that waits out the
// server's grace period (WithGraceWait).
type GraceWait struct {
	// Wait is called before each pause of GraceRetry after a call was
	// answered NLM4_DENIED_GRACE_PERIOD, Resume after it (also when ctx
	// ends during it), before the call is sent again or given up;
	// Resume may block.
	Wait, Resume func()
}

type graceWaitKey struct{}

// WithGraceWait returns a context whose lock calls (Locker's Test, Lock,
// Unlock, UnlockOwner) tell gw when they wait out the server's grace
// period, between their tries: a consumer that waits for its calls in
// flight to end (a FUSE mount handing its requests over) need not wait
// for those, which may last the whole grace period (90 s by default on
// Linux), and may hold one in Resume meanwhile. A nil gw leaves ctx
// unchanged.
func WithGraceWait(ctx context.Context, gw *GraceWait) context.Context {
	if gw == nil {
		return ctx
	}
	return context.WithValue(ctx, graceWaitKey{}, gw)
}

// call makes one NLM call; results decodes the reply and returns its
// status. Each try holds l.rw shared (unless exclusive: the caller, a
// reclaim, holds it exclusively) and runs after, if not nil, with the
// status before releasing it, so that what the reply changes is recorded
// before a reclaim can look. A status of NLM4_DENIED_GRACE_PERIOD on a
// call that is not a reclaim is retried after GraceRetry until ctx ends,
// as Linux nlmclnt_call does, and starts a reclaim of the held locks:
// the server restarted. The pause is told to ctx's GraceWait, if any.
func (l *Locker) call(ctx context.Context, proc uint32, exclusive bool, args func(e *xdr.Encoder),
	results func(d *xdr.Decoder) (nlm.Stat, error), after func(nlm.Stat)) (nlm.Stat, error) {
	rpc, err := l.client(ctx)
	if err != nil {
		return 0, err
	}
	for {
		var st nlm.Stat
		if !exclusive {
			l.rw.RLock()
		}
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if proc == nlm.ProcLock {
			// a LOCK is not abandoned when ctx ends: the server might
			// grant or queue it after a CANCEL or UNLOCK sent next
			// (its calls run concurrently), leaving a lock nobody
			// knows of; its reply is awaited, for lockCallTimeout
			cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), lockCallTimeout)
		}
		err := rpc.Call(cctx, sunrpc.CallSpec{
			Prog: nlm.Program, Vers: nlm.Version, Proc: proc,
			Args: func(b *sunrpc.Builder) { args(&b.Encoder) },
			Results: func(d *xdr.Decoder, _ int) error {
				var err error
				st, err = results(d)
				return err
			},
			MaxReplySize: maxNLMReply,
		})
		cancel()
		if err == nil && after != nil && (st != nlm.DeniedGracePeriod || exclusive) {
			after(st)
		}
		if !exclusive {
			l.rw.RUnlock()
		}
		if err != nil {
			if ctx.Err() != nil {
				return 0, fmt.Errorf("%w: %w", ErrLockInterrupted, err)
			}
			return 0, fmt.Errorf("%w: NLM proc %d: %w", ErrLockService, proc, err)
		}
		if st != nlm.DeniedGracePeriod || exclusive {
			return st, nil
		}
		klog.V(2).InfoS("NLM server in its grace period, retrying", "server", l.srv.Server, "proc", proc, "delay", l.opts.GraceRetry)
		l.serverRestarted("grace period")
		if err := l.graceWait(ctx); err != nil {
			return 0, err
		}
	}
}

// graceWait waits GraceRetry before a call refused for the grace period
// is sent again, telling ctx's GraceWait. Errors: ErrLockInterrupted when
// ctx ends first.
func (l *Locker) graceWait(ctx context.Context) error {
	gw, _ := ctx.Value(graceWaitKey{}).(*GraceWait)
	if gw != nil {
		gw.Wait()
		defer gw.Resume()
	}
	t := time.NewTimer(l.opts.GraceRetry)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w (server in grace period)", ErrLockInterrupted, ctx.Err())
	}
}

// Test asks the server whether r could be locked (NLM4_TEST): nil when
// it could, else the conflicting lock.
func (l *Locker) Test(ctx context.Context, r LockRequest) (*LockHolder, error) {
	o := l.owner(r.Owner, r.Pid)
	defer l.put(o)
	a := nlm.TestArgs{Cookie: l.newCookie(), Exclusive: r.Exclusive, Lock: l.nlmLock(r.FH, o, r.Start, r.End)}
	var res nlm.TestRes
	st, err := l.call(ctx, nlm.ProcTest, false, a.Encode, func(d *xdr.Decoder) (nlm.Stat, error) {
		err := res.Decode(d)
		return res.Stat, err
	}, nil)
	if err != nil {
		return nil, err
	}
	switch st {
	case nlm.Granted:
		return nil, nil
	case nlm.Denied:
		h := &LockHolder{Exclusive: true}
		if res.Holder != nil {
			h.Exclusive, h.Svid = res.Holder.Exclusive, res.Holder.Svid
			h.Start, h.End = lockRange(res.Holder.Offset, res.Holder.Length)
		} else {
			h.Start, h.End = r.Start, r.End
		}
		return h, nil
	}
	return nil, statErr(st)
}

// Lock locks r on the server (NLM4_LOCK). Without wait a conflicting
// lock fails with ErrLockDenied. With wait the LOCK asks the server to
// block: it answers NLM4_BLOCKED and later calls GRANTED back when the
// lock is ours (callbacks.go); meanwhile the LOCK is sent again every
// Poll, which completes the wait when no callback comes. When ctx ends
// first, the blocked request is cancelled (NLM4_CANCEL), a lock granted
// meanwhile is unlocked, and the error wraps ErrLockInterrupted.
func (l *Locker) Lock(ctx context.Context, r LockRequest, wait bool) error {
	o := l.owner(r.Owner, r.Pid)
	defer l.put(o)
	lk := l.nlmLock(r.FH, o, r.Start, r.End)
	var w *waiter
	if wait {
		w = &waiter{fh: string(r.FH.Bytes()), svid: o.svid, offset: lk.Offset, length: lk.Length,
			granted: make(chan struct{}), wake: make(chan struct{}, 1)}
		l.mu.Lock()
		l.waiters[w] = struct{}{}
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			delete(l.waiters, w)
			l.mu.Unlock()
		}()
	}
	var blockedAt time.Time // when the server first answered NLM4_BLOCKED
	woken := ""             // the address of a GRANTED that woke the wait, to confirm
	for {
		a := nlm.LockArgs{Cookie: l.newCookie(), Block: wait, Exclusive: r.Exclusive, Lock: lk, State: l.state()}
		var res nlm.Res
		st, err := l.call(ctx, nlm.ProcLock, false, a.Encode, func(d *xdr.Decoder) (nlm.Stat, error) {
			err := res.Decode(d)
			return res.Stat, err
		}, func(st nlm.Stat) {
			if st == nlm.Granted {
				l.record(r, o)
			}
		})
		if err != nil {
			if wait && ctx.Err() != nil {
				return l.cancel(r, o, lk, w, err)
			}
			return err
		}
		if st != nlm.Blocked || !wait {
			switch {
			case st == nlm.Granted && woken != "":
				l.callbacks.Add(1)
				klog.InfoS("NLM: blocked lock granted by callback", "server", l.srv.Server, "svid", o.svid, "waited", time.Since(blockedAt), "from", woken, "confirmed", "LOCK")
			case st == nlm.Granted && !blockedAt.IsZero():
				l.retries.Add(1)
				klog.InfoS("NLM: blocked lock granted by retry", "server", l.srv.Server, "svid", o.svid, "waited", time.Since(blockedAt))
			}
			return statErr(st)
		}
		woken = ""
		if blockedAt.IsZero() {
			blockedAt = time.Now()
		}
		t := time.NewTimer(l.opts.Poll)
		select {
		case <-w.granted:
			t.Stop()
			l.rw.RLock()
			l.record(r, o)
			l.rw.RUnlock()
			l.callbacks.Add(1)
			klog.InfoS("NLM: blocked lock granted by callback", "server", l.srv.Server, "svid", o.svid, "waited", time.Since(blockedAt))
			return nil
		case <-w.wake:
			t.Stop()
			l.mu.Lock()
			woken = w.wokenBy
			l.mu.Unlock()
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return l.cancel(r, o, lk, w, ctx.Err())
		}
	}
}

// cancel withdraws a blocked LOCK whose wait ended with cause
// (NLM4_CANCEL), then unlocks the range if GRANTED came meanwhile, or if
// the server reports no blocked request (it may have granted the lock as
// the CANCEL went out). It returns an error wrapping ErrLockInterrupted.
func (l *Locker) cancel(r LockRequest, o *lockOwner, lk nlm.Lock, w *waiter, cause error) error {
	ctx, done := context.WithTimeout(context.Background(), 30*time.Second)
	defer done()
	a := nlm.CancArgs{Cookie: l.newCookie(), Block: true, Exclusive: r.Exclusive, Lock: lk}
	var res nlm.Res
	st, err := l.call(ctx, nlm.ProcCancel, false, a.Encode, func(d *xdr.Decoder) (nlm.Stat, error) {
		err := res.Decode(d)
		return res.Stat, err
	}, nil)
	l.mu.Lock()
	granted := w.done
	delete(l.waiters, w)
	l.mu.Unlock()
	// NLM4_DENIED from CANCEL: no blocked request matched, it may have
	// been granted; the unlock is harmless if it was not, and Linux
	// unlocks after a cancel that fails too.
	if granted || err != nil || st != nlm.Granted {
		// unlock what the owner did not hold before, so that an
		// interrupted request over a held range keeps the held part
		for _, u := range l.unheld(r) {
			ua := nlm.UnlockArgs{Cookie: l.newCookie(), Lock: l.nlmLock(r.FH, o, u[0], u[1])}
			var ures nlm.Res
			_, uerr := l.call(ctx, nlm.ProcUnlock, false, ua.Encode, func(d *xdr.Decoder) (nlm.Stat, error) {
				err := ures.Decode(d)
				return ures.Stat, err
			}, nil)
			if uerr != nil {
				klog.ErrorS(uerr, "NLM: unlock after an interrupted blocking lock failed", "server", l.srv.Server, "svid", o.svid)
			}
		}
	}
	if err != nil {
		klog.ErrorS(err, "NLM: CANCEL of an interrupted blocking lock failed", "server", l.srv.Server, "svid", o.svid)
	}
	return fmt.Errorf("%w: %w", ErrLockInterrupted, cause)
}

// unheld returns the parts of r's range its owner holds no lock on, as
// inclusive ranges.
func (l *Locker) unheld(r LockRequest) [][2]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	end := min(r.End, MaxLockOffset)
	var held []posixlock.Range
	if h := l.held[heldKey{r.FH, r.Owner}]; h != nil {
		held = h.set.Ranges()
	}
	var out [][2]uint64
	next := r.Start
	for _, h := range held {
		if h.End < next || h.Start > end {
			continue
		}
		if h.Start > next {
			out = append(out, [2]uint64{next, h.Start - 1})
		}
		if h.End >= end {
			return out
		}
		next = h.End + 1
	}
	return append(out, [2]uint64{next, end})
}

// record notes that r is held.
func (l *Locker) record(r LockRequest, o *lockOwner) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := heldKey{r.FH, r.Owner}
	h := l.held[k]
	if h == nil {
		h = &heldFile{fh: r.FH, owner: o}
		o.refs++
		l.held[k] = h
		if l.opts.State != nil {
			l.opts.State.monitor(l.srv.Server)
		}
	}
	h.set.Add(r.Start, min(r.End, MaxLockOffset), r.Exclusive)
}

// forget notes that start..end of (fh, owner) is no longer held.
func (l *Locker) forget(fh nfs3.FH, owner uint64, start, end uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := heldKey{fh, owner}
	h := l.held[k]
	if h == nil {
		return
	}
	h.set.Clear(start, min(end, MaxLockOffset))
	if h.set.Empty() {
		delete(l.held, k)
		l.putLocked(h.owner)
	}
}

// holds reports whether owner holds a lock overlapping start..end of fh.
func (l *Locker) holds(fh nfs3.FH, owner uint64, start, end uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[heldKey{fh, owner}]
	return h != nil && h.set.Overlaps(start, min(end, MaxLockOffset))
}

// Unlock unlocks r's range (NLM4_UNLOCK); a range the owner holds nothing
// of is not sent (as Linux, which unlocks locally first).
func (l *Locker) Unlock(ctx context.Context, r LockRequest) error {
	if !l.holds(r.FH, r.Owner, r.Start, r.End) {
		return nil
	}
	o := l.owner(r.Owner, 0)
	defer l.put(o)
	a := nlm.UnlockArgs{Cookie: l.newCookie(), Lock: l.nlmLock(r.FH, o, r.Start, r.End)}
	var res nlm.Res
	st, err := l.call(ctx, nlm.ProcUnlock, false, a.Encode, func(d *xdr.Decoder) (nlm.Stat, error) {
		err := res.Decode(d)
		return res.Stat, err
	}, func(nlm.Stat) {
		// whatever the status, the server no longer has the lock
		l.forget(r.FH, r.Owner, r.Start, r.End)
	})
	if err != nil {
		return err
	}
	return statErr(st)
}

// UnlockOwner unlocks every lock owner holds on fh (a close: POSIX locks
// end at the first close of the file by their owner, flock locks at the
// last close of their open file). Nothing is sent when it holds none.
func (l *Locker) UnlockOwner(ctx context.Context, fh nfs3.FH, owner uint64) error {
	return l.Unlock(ctx, LockRequest{FH: fh, Owner: owner, Start: 0, End: MaxLockOffset})
}

// Held returns the locks held, as this client knows them.
func (l *Locker) Held() []HeldLock {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []HeldLock
	for _, h := range l.held {
		for _, r := range h.set.Ranges() {
			out = append(out, HeldLock{FH: h.fh, Owner: h.owner.id, Svid: h.owner.svid, Start: r.Start, End: r.End, Exclusive: r.Exclusive})
		}
	}
	return out
}

// Close unlocks every held lock (bounded by ctx), ends the waits in
// progress, and stops serving the Locker's callbacks. Later calls fail
// with ErrLockService. It returns the first unlock error.
func (l *Locker) Close(ctx context.Context) error {
	var errs []error
	for _, h := range l.Held() {
		if err := l.Unlock(ctx, LockRequest{FH: h.FH, Owner: h.Owner, Start: h.Start, End: h.End}); err != nil {
			errs = append(errs, err)
		}
	}
	l.mu.Lock()
	l.closed = true
	rpc, onCB := l.rpc, l.onCB
	l.rpc, l.onCB = nil, false
	l.mu.Unlock()
	if onCB {
		callbacks.remove(l)
	}
	if rpc != nil {
		rpc.Close()
	}
	return errors.Join(errs...)
}

// granted completes the blocked LOCK that a GRANTED callback names, and
// reports whether one was waiting.
func (l *Locker) granted(a *nlm.TestArgs) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.waiters {
		if w.names(a) {
			if !w.done {
				w.done = true
				close(w.granted)
			}
			return true
		}
	}
	return false
}

// wake wakes the blocked LOCK a GRANTED from peer names when peer is not the
// address the mount reaches the server at: the waiter re-sends its LOCK at once
// and is completed only by the server's answer on the mount's connection, so a
// GRANTED from anyone else cannot hand a process a lock the server did not grant.
// It reports whether a waiter matched.
func (l *Locker) wake(a *nlm.TestArgs, peer net.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.waiters {
		if w.names(a) && !w.done {
			w.wokenBy = peer.String()
			select {
			case w.wake <- struct{}{}:
			default:
			}
			return true
		}
	}
	return false
}

// state is the NSM state of this host sent in LOCK (nlm4_lockargs.state).
func (l *Locker) state() int32 {
	if l.opts.State != nil {
		return l.opts.State.State()
	}
	return memState
}

// memState is the NSM state of a process without a state directory: odd
// (the host is up) and different at each start.
var memState = nsmstate.Volatile()

// hostStateNow is the NSM state this process's status monitor answers
// with: that of the first Locker with a HostState, else memState.
func hostStateNow() int32 {
	callbacks.mu.Lock()
	defer callbacks.mu.Unlock()
	for l := range callbacks.lockers {
		if l.opts.State != nil {
			return l.opts.State.State()
		}
	}
	return memState
}

// serverRestarted starts a reclaim of the held locks unless one is in
// progress: the server rebooted (SM_NOTIFY) or is in its grace period.
func (l *Locker) serverRestarted(why string) {
	l.mu.Lock()
	n := len(l.held)
	l.mu.Unlock()
	if n == 0 {
		return
	}
	go l.reclaim(why)
}

var reclaiming sync.Map // *Locker -> struct{}: a reclaim in progress

// reclaim sends every held lock again with reclaim set (Linux
// nlmclnt_reclaim, from its reclaimer thread), holding l.rw so that no
// other lock call runs meanwhile. A lock the server refuses is lost: it
// is forgotten and logged.
func (l *Locker) reclaim(why string) {
	if _, busy := reclaiming.LoadOrStore(l, struct{}{}); busy {
		return
	}
	defer reclaiming.Delete(l)
	l.rw.Lock()
	defer l.rw.Unlock()
	l.reclaims.Add(1)
	held := l.Held()
	klog.InfoS("NLM: reclaiming locks", "server", l.srv.Server, "reason", why, "locks", len(held))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, h := range held {
		o := l.owner(h.Owner, 0)
		st, err := l.lockAgain(ctx, h, o, true)
		if err == nil {
			err = statErr(st)
		}
		if err != nil {
			klog.ErrorS(err, "NLM: lock lost: reclaim failed", "server", l.srv.Server, "svid", o.svid, "start", h.Start, "end", h.End)
			l.forget(h.FH, h.Owner, h.Start, h.End)
		}
		l.put(o)
	}
}

// lockAgain asks the server for the held lock h of owner o again, a
// non-blocking LOCK (NLM4 section 10.3), with the reclaim flag in a grace
// period after the server's restart (reclaim). Called with l.rw held.
func (l *Locker) lockAgain(ctx context.Context, h HeldLock, o *lockOwner, reclaim bool) (nlm.Stat, error) {
	a := nlm.LockArgs{Cookie: l.newCookie(), Exclusive: h.Exclusive, Lock: l.nlmLock(h.FH, o, h.Start, h.End), Reclaim: reclaim, State: l.state()}
	var res nlm.Res
	return l.call(ctx, nlm.ProcLock, true, a.Encode, func(d *xdr.Decoder) (nlm.Stat, error) {
		err := res.Decode(d)
		return res.Stat, err
	}, nil)
}
