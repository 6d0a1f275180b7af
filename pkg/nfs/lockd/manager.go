package lockd

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// Defaults (Linux lockd's nlm_grace_period and nlm_timeout).
const (
	DefaultGracePeriod   = 90 * time.Second
	DefaultRetryInterval = 10 * time.Second
	DefaultNotifyFor     = 15 * time.Minute
	DefaultCallTimeout   = 10 * time.Second
)

// Options configures a Manager.
type Options struct {
	// StateDir keeps the NSM state number (StateDir/state) and the
	// monitored clients (StateDir/clients.json); created (mode 0700) if
	// missing. Empty: both live in memory, so a restart forgets which
	// clients to notify and opens no grace period.
	StateDir string
	// GracePeriod is how long after a restart only reclaims are granted
	// (NLM4_DENIED_GRACE_PERIOD for other LOCKs, TEST, UNLOCK and
	// CANCEL). It is opened only when a previous instance recorded clients
	// in StateDir: they are the ones with locks to reclaim. 0: none.
	GracePeriod time.Duration
	// RetryInterval is the wait before GRANTED is sent again after the
	// client could not be reached; 0 means DefaultRetryInterval.
	RetryInterval time.Duration
	// NotifyFor bounds how long SM_NOTIFY is retried to an unreachable
	// client after a restart; 0 means DefaultNotifyFor.
	NotifyFor time.Duration
	// CallTimeout bounds one GRANTED or SM_NOTIFY call (port lookup,
	// dial, reply); 0 means DefaultCallTimeout.
	CallTimeout time.Duration
	// Name is the mon_name this server announces in SM_NOTIFY (a host
	// name or address clients know it by). Empty: the local address of
	// the connection to each client.
	Name string
	// FileKey checks an NLM file handle for the client of req (its
	// address, its RPC-with-TLS session) and returns the key its locks
	// are kept under (the same for every handle of one file), or a
	// status: nlm.StaleFH for an unknown handle. Nil: the handle's bytes
	// are the key.
	FileKey func(fh []byte, req *sunrpc.Request) (string, nlm.Stat)
	// LookupPort returns the TCP port of program prog version vers on
	// host (an IP address); nil means asking rpcbind at host:111
	// (sunrpc.PortmapGetPort).
	LookupPort func(ctx context.Context, host string, prog, vers uint32) (int, error)
	// NodeCallbacks is the unix socket of this node's lock callback
	// service (package lockcb), or "". When set, the client procedures
	// this server receives in the node service's place (it holds NLM and
	// NSM in the node's rpcbind: GRANTED, GRANTED_MSG, SM_NOTIFY for the
	// node's mounts) are relayed there (relay.go).
	NodeCallbacks string
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Manager is the NLM v4 lock manager and NSM v1 status monitor of an
// export server: POSIX byte-range locks per file, blocked requests granted
// by GRANTED callbacks, client monitoring, grace period and reboot
// notification. Its methods are safe for concurrent use.
type Manager struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	files    map[string]*file
	graceEnd time.Time

	nsm *nsmStore

	cookie atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// file is the lock state of one file.
type file struct {
	key    string
	locks  locks
	blocks []*block // FIFO
}

// block is a blocked LOCK request, queued until it can be granted, then
// kept (granted: true) until the client acknowledges the GRANTED
// callback, re-sends the LOCK, cancels it or unlocks.
type block struct {
	f         *file
	owner     Owner
	exclusive bool
	r         Range
	lock      nlm.Lock // as the client sent it, for the GRANTED call
	host      string   // the client's address (IP) for the callback
	granted   bool
	cookie    []byte // this server's GRANTED cookie
	done      bool
	wake      chan struct{}
}

// New returns a Manager: it reads (or creates) the NSM state in
// opts.StateDir, bumps the state number by 2 (odd: up), and opens the
// grace period when clients were recorded. Start sends SM_NOTIFY to them.
func New(opts Options) (*Manager, error) {
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = DefaultRetryInterval
	}
	if opts.NotifyFor <= 0 {
		opts.NotifyFor = DefaultNotifyFor
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	st, err := openNSMStore(opts.StateDir)
	if err != nil {
		return nil, err
	}
	m := &Manager{opts: opts, log: opts.Logger, files: map[string]*file{}, nsm: st}
	var seed [8]byte
	rand.Read(seed[:])
	m.cookie.Store(binary.BigEndian.Uint64(seed[:]))
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if opts.GracePeriod > 0 && len(st.notifyList()) > 0 {
		m.graceEnd = time.Now().Add(opts.GracePeriod)
	}
	m.log.Info("lockd: started", "nsmState", st.state(), "grace", m.GraceRemaining(), "toNotify", len(st.notifyList()))
	return m, nil
}

// State returns this server's NSM state number (odd).
func (m *Manager) State() int32 { return m.nsm.state() }

// GraceRemaining returns how long the grace period still lasts (0: over).
func (m *Manager) GraceRemaining() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.graceLeftLocked()
}

func (m *Manager) graceLeftLocked() time.Duration {
	if m.graceEnd.IsZero() {
		return 0
	}
	d := time.Until(m.graceEnd)
	if d <= 0 {
		m.graceEnd = time.Time{}
		return 0
	}
	return d
}

// EndGrace ends the grace period now.
func (m *Manager) EndGrace() {
	m.mu.Lock()
	m.graceEnd = time.Time{}
	m.mu.Unlock()
}

// Start sends SM_NOTIFY, in the background, to every client recorded by
// the previous instance, retrying an unreachable one for
// Options.NotifyFor; a notified client is forgotten until its next LOCK.
func (m *Manager) Start() {
	for _, c := range m.nsm.notifyList() {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.notifyLoop(c)
		}()
	}
}

// Close stops the callbacks and notifications in progress and waits for
// them. Locks are forgotten.
func (m *Manager) Close() error {
	m.cancel()
	m.wg.Wait()
	return nil
}

// Request is one lock request after decoding and checking: the file's
// key, the lock as sent, its owner and range, and the client's address.
type Request struct {
	Key       string
	Lock      nlm.Lock
	Exclusive bool
	Owner     Owner
	Range     Range
	Host      string // the client's IP address
}

// NewRequest builds a Request from an nlm4_lock: nlm.FBig for a range
// past MaxOffset.
func NewRequest(key string, l *nlm.Lock, exclusive bool, host string) (Request, nlm.Stat) {
	r, st := RangeOf(l.Offset, l.Length)
	if st != nlm.Granted {
		return Request{}, st
	}
	return Request{
		Key: key, Lock: *l, Exclusive: exclusive, Range: r, Host: host,
		Owner: Owner{Caller: l.CallerName, OH: string(l.OH), Svid: l.Svid},
	}, nlm.Granted
}

// Test is NLM TEST: the conflicting lock of another owner, or none.
func (m *Manager) Test(q *Request) (nlm.Stat, *nlm.Holder) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.graceLeftLocked() > 0 {
		return nlm.DeniedGracePeriod, nil
	}
	f := m.files[q.Key]
	if f == nil {
		return nlm.Granted, nil
	}
	if h, ok := f.locks.conflict(q.Owner, q.Exclusive, q.Range); ok {
		return nlm.Denied, h.Holder()
	}
	return nlm.Granted, nil
}

// Lock is NLM LOCK. During the grace period only reclaims are granted;
// a reclaim after it is NLM4_DENIED_GRACE_PERIOD (as Linux lockd). A
// conflict is Denied, or Blocked with wait: the request is queued and
// granted by a GRANTED call when the conflicting locks go. A re-sent
// blocking request is answered Blocked again while queued, and Granted
// once granted (the client may have missed the callback).
func (m *Manager) Lock(q *Request, wait, reclaim bool) nlm.Stat {
	m.mu.Lock()
	defer m.mu.Unlock()
	inGrace := m.graceLeftLocked() > 0
	if inGrace != reclaim {
		return nlm.DeniedGracePeriod
	}
	f := m.fileLocked(q.Key)
	if _, ok := f.locks.conflict(q.Owner, q.Exclusive, q.Range); ok {
		if !wait {
			m.dropFileIfIdleLocked(f)
			return nlm.Denied
		}
		if m.findBlockLocked(f, q) == nil {
			b := &block{f: f, owner: q.Owner, exclusive: q.Exclusive, r: q.Range, lock: q.Lock, host: q.Host, wake: make(chan struct{}, 1)}
			b.lock.FH = append([]byte(nil), q.Lock.FH...)
			b.lock.OH = append([]byte(nil), q.Lock.OH...)
			f.blocks = append(f.blocks, b)
		}
		return nlm.Blocked
	}
	if b := m.findBlockLocked(f, q); b != nil {
		m.removeBlockLocked(b) // granted meanwhile, or free now: the client has its answer
	}
	f.locks.set(q.Owner, q.Exclusive, q.Range)
	return nlm.Granted
}

// Cancel is NLM CANCEL: the queued request matching q is removed; if it
// had been granted but not acknowledged, the lock it was granted is
// released. Granted whether or not a request matched, as Linux lockd.
func (m *Manager) Cancel(q *Request) nlm.Stat {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.graceLeftLocked() > 0 {
		return nlm.DeniedGracePeriod
	}
	f := m.files[q.Key]
	if f == nil {
		return nlm.Granted
	}
	if b := m.findBlockLocked(f, q); b != nil {
		m.removeBlockLocked(b)
		if b.granted {
			f.locks.unlock(b.owner, b.r)
			m.wakeLocked(f)
		}
	}
	m.dropFileIfIdleLocked(f)
	return nlm.Granted
}

// Unlock is NLM UNLOCK: owner q.Owner's locks on q.Range are released
// (split when the range is in the middle of one) and its requests queued
// on that range are cancelled, as Linux lockd's nlmsvc_unlock. Granted
// also when nothing was held.
func (m *Manager) Unlock(q *Request) nlm.Stat {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.graceLeftLocked() > 0 {
		return nlm.DeniedGracePeriod
	}
	f := m.files[q.Key]
	if f == nil {
		return nlm.Granted
	}
	for _, b := range append([]*block(nil), f.blocks...) {
		if b.owner == q.Owner && b.r.overlaps(q.Range) {
			m.removeBlockLocked(b)
		}
	}
	if f.locks.unlock(q.Owner, q.Range) {
		m.wakeLocked(f)
	}
	m.dropFileIfIdleLocked(f)
	return nlm.Granted
}

// FreeAll releases every lock and queued request of the client host
// caller (its caller_name), as NLM FREE_ALL and a received SM_NOTIFY do,
// and returns the number of locks released.
func (m *Manager) FreeAll(caller string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, f := range m.files {
		for _, b := range append([]*block(nil), f.blocks...) {
			if b.owner.Caller == caller {
				m.removeBlockLocked(b)
			}
		}
		if freed := f.locks.o.RemoveIf(func(o Owner) bool { return o.Caller == caller }); freed > 0 {
			n += freed
			m.wakeLocked(f)
		}
		m.dropFileIfIdleLocked(f)
	}
	return n
}

// Held returns a copy of the locks held on the file with key key.
func (m *Manager) Held(key string) []Held {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.files[key]; f != nil {
		return f.locks.held()
	}
	return nil
}

// Waiting returns the number of queued requests (granted or not) on key.
func (m *Manager) Waiting(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.files[key]; f != nil {
		return len(f.blocks)
	}
	return 0
}

func (m *Manager) fileLocked(key string) *file {
	f := m.files[key]
	if f == nil {
		f = &file{key: key}
		m.files[key] = f
	}
	return f
}

func (m *Manager) dropFileIfIdleLocked(f *file) {
	if f.locks.o.Len() == 0 && len(f.blocks) == 0 {
		delete(m.files, f.key)
	}
}

// findBlockLocked returns the queued request of q's owner, kind and range.
func (m *Manager) findBlockLocked(f *file, q *Request) *block {
	for _, b := range f.blocks {
		if b.owner == q.Owner && b.r == q.Range && b.exclusive == q.Exclusive {
			return b
		}
	}
	return nil
}

func (m *Manager) removeBlockLocked(b *block) {
	if b.done {
		return
	}
	b.done = true
	f := b.f
	for i, x := range f.blocks {
		if x == b {
			f.blocks = append(f.blocks[:i], f.blocks[i+1:]...)
			break
		}
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// wakeLocked grants, in arrival order, the queued requests of f that no
// longer conflict, and starts their GRANTED callbacks.
func (m *Manager) wakeLocked(f *file) {
	for _, b := range f.blocks {
		if _, ok := f.locks.conflict(b.owner, b.exclusive, b.r); b.granted || ok {
			continue
		}
		f.locks.set(b.owner, b.exclusive, b.r)
		b.granted = true
		b.cookie = binary.BigEndian.AppendUint64(nil, m.cookie.Add(1))
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.grantLoop(b)
		}()
	}
}

// grantLoop calls GRANTED on the client of granted block b until the
// client answers it, b is removed or the Manager closes. A client that
// answers with another status than Granted or DeniedGracePeriod does not
// want the lock (it gave up waiting): the lock is released.
func (m *Manager) grantLoop(b *block) {
	for {
		args := nlm.TestArgs{Cookie: b.cookie, Exclusive: b.exclusive, Lock: b.lock}
		args.Lock.Offset, args.Lock.Length = b.r.Start, b.r.Length()
		stat, err := m.callGranted(b.host, &args)
		m.mu.Lock()
		if b.done {
			m.mu.Unlock()
			return
		}
		done := m.grantReplyLocked(b, stat, err)
		m.mu.Unlock()
		if done {
			return
		}
		t := time.NewTimer(m.opts.RetryInterval)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return
		case <-b.wake:
			t.Stop()
			m.mu.Lock()
			done := b.done
			m.mu.Unlock()
			if done {
				return
			}
		case <-t.C:
		}
	}
}

// grantReplyLocked applies the client's answer to GRANTED (or
// GRANTED_RES) for b and reports whether b is settled.
func (m *Manager) grantReplyLocked(b *block, stat nlm.Stat, err error) bool {
	switch {
	case err != nil:
		m.log.Info("lockd: GRANTED callback failed; the lock stays granted and is offered again", "client", b.host, "caller", b.owner.Caller, "err", err, "retry", m.opts.RetryInterval)
		return false
	case stat == nlm.Granted:
		m.removeBlockLocked(b)
		m.dropFileIfIdleLocked(b.f)
		return true
	case stat == nlm.DeniedGracePeriod:
		return false
	default:
		m.log.Info("lockd: client refused a granted lock; releasing it", "client", b.host, "caller", b.owner.Caller, "stat", stat)
		m.removeBlockLocked(b)
		b.f.locks.unlock(b.owner, b.r)
		m.wakeLocked(b.f)
		m.dropFileIfIdleLocked(b.f)
		return true
	}
}

// GrantedRes applies a GRANTED_RES (the client's asynchronous answer to
// a GRANTED callback) by its cookie; an unknown cookie is ignored, as
// Linux lockd does, and reported false.
func (m *Manager) GrantedRes(cookie []byte, stat nlm.Stat) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.files {
		for _, b := range f.blocks {
			if b.granted && string(b.cookie) == string(cookie) {
				m.grantReplyLocked(b, stat, nil)
				return true
			}
		}
	}
	return false
}

// Monitor records client host caller at address host (SM_MON's
// equivalent) so that it is notified after this server restarts; the
// record is written before it returns. Recording a known client is
// cheap.
func (m *Manager) Monitor(caller, host string) error {
	return m.nsm.add(caller, host)
}

// Rebooted handles an SM_NOTIFY sent from address peer: the locks of
// the clients whose caller_name or recorded address is monName and whose
// recorded address is peer are released, and they are no longer
// monitored. A notification from another address than the client's is
// ignored, as rpc.statd ignores spoofed ones. It returns the locks
// released.
func (m *Manager) Rebooted(monName, peer string) int {
	n := 0
	for _, c := range m.nsm.match(monName, peer) {
		n += m.FreeAll(c)
		m.nsm.remove(c)
	}
	return n
}

// errNoPort is returned when a client's service is not registered.
var errNoPort = errors.New("lockd: service not registered with the client's rpcbind")

func (m *Manager) port(ctx context.Context, host string, prog, vers uint32) (string, error) {
	look := m.opts.LookupPort
	if look == nil {
		look = RPCBindPort
	}
	p, err := look(ctx, host, prog, vers)
	if err != nil {
		return "", err
	}
	if p <= 0 || p > 65535 {
		return "", fmt.Errorf("%w: %s program %d version %d", errNoPort, host, prog, vers)
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}
