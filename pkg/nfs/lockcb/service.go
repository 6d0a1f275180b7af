package lockcb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/internal/unixsock"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/statmon"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// Service defaults.
const (
	// DefaultRecheck is how often the rpcbind registrations are checked
	// and made again where they are free, 5 s.
	DefaultRecheck = 5 * time.Second
	// DefaultAnswerTimeout bounds a mount process's answer to a callback,
	// 5 s: within the call timeout of lock servers (Linux lockd's is
	// 10 s, ours DefaultCallTimeout).
	DefaultAnswerTimeout = 5 * time.Second
)

// NotDelivered is the Stat of a Reply to a relayed Call that reached no
// process that answered: the relay answers its caller with SYSTEM_ERR,
// which calls again later.
const NotDelivered = ^uint32(0)

// ErrNotDelivered wraps a callback no mount process answered.
var ErrNotDelivered = errors.New("lockcb: callback not delivered")

// Results of a callback, the result label of Count.
const (
	ResultGranted   = "granted"   // GRANTED(_MSG): a blocked LOCK took the lock
	ResultDenied    = "denied"    // GRANTED(_MSG): the process had no such LOCK waiting
	ResultUnrouted  = "unrouted"  // no attached process owns the lock or holds locks on the server
	ResultDelivered = "delivered" // SM_NOTIFY: passed to one process (counted per process)
	ResultFailed    = "failed"    // the process did not answer in time, or the connection failed
)

// Count is how many callbacks of one procedure ended with one result.
type Count struct {
	Proc   string // "GRANTED", "GRANTED_MSG", "SM_NOTIFY"
	Result string // one of the Result constants
	N      uint64
}

// Service is a node's lock callback service (see the package comment).
// Set its fields, then call Run.
type Service struct {
	// Socket is the unix socket mount processes attach to and lock
	// servers relay to (a stale file there is removed).
	Socket string
	// RPCBind is the node's rpcbind; "" means DefaultRPCBind.
	RPCBind string
	// Listen is the TCP address of the NLM and NSM service; "" means
	// ":0" (any free port, every address).
	Listen string
	// Recheck is how often the rpcbind registrations are made again where
	// free; 0 means DefaultRecheck.
	Recheck time.Duration
	// AnswerTimeout bounds a mount process's answer; 0 means
	// DefaultAnswerTimeout.
	AnswerTimeout time.Duration

	mu      sync.Mutex
	monitor *statmon.Monitor // the NSM procedures (statmon.Monitor.Handlers)
	conns   map[*peerConn]struct{}
	byTag   map[string]*peerConn
	counts  map[[2]string]uint64
	port    int
	ready   chan struct{}
}

// peerConn is one attached mount process or relaying lock server.
type peerConn struct {
	c       *net.UnixConn
	tag     string   // guarded by Service.mu
	servers []string // guarded by Service.mu

	nextID  atomic.Uint32
	mu      sync.Mutex
	pending map[uint32]chan uint32
	closed  bool
}

func (s *Service) init() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready == nil {
		s.ready = make(chan struct{})
	}
}

// Ready is closed once Run listens on Socket and the TCP port.
func (s *Service) Ready() <-chan struct{} {
	s.init()
	return s.ready
}

// Port returns the TCP port of the NLM and NSM service (0 before Run
// listens).
func (s *Service) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Monitor returns the node's status monitor (nil before Run): the
// monitors local lock managers asked for and the state number it
// answers.
func (s *Service) Monitor() *statmon.Monitor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.monitor
}

// Attached returns the tags of the attached mount processes, sorted.
func (s *Service) Attached() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for t := range s.byTag {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Counts returns the callbacks received, by procedure and result, sorted.
func (s *Service) Counts() []Count {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Count, 0, len(s.counts))
	for k, n := range s.counts {
		out = append(out, Count{Proc: k[0], Result: k[1], N: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Proc != out[j].Proc {
			return out[i].Proc < out[j].Proc
		}
		return out[i].Result < out[j].Result
	})
	return out
}

func (s *Service) count(proc, result string) {
	s.mu.Lock()
	s.counts[[2]string{proc, result}]++
	s.mu.Unlock()
}

// Run serves until ctx ends: the NLM and NSM programs over TCP,
// registered with the node's rpcbind while no other live service holds
// them (checked every Recheck), and the unix socket. It removes its
// registrations and the socket when it returns. Errors: the listeners'.
func (s *Service) Run(ctx context.Context) error {
	s.init()
	if s.RPCBind == "" {
		s.RPCBind = DefaultRPCBind
	}
	if s.Listen == "" {
		s.Listen = ":0"
	}
	if s.Recheck <= 0 {
		s.Recheck = DefaultRecheck
	}
	if s.AnswerTimeout <= 0 {
		s.AnswerTimeout = DefaultAnswerTimeout
	}
	s.mu.Lock()
	s.conns, s.byTag, s.counts = map[*peerConn]struct{}{}, map[string]*peerConn{}, map[[2]string]uint64{}
	s.monitor = &statmon.Monitor{RPCBind: s.RPCBind}
	s.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(s.Socket), 0o755); err != nil {
		return fmt.Errorf("lockcb: %w", err)
	}
	// a predecessor that still runs (a rolling update's old mounter)
	// leaves the path alone when it exits
	ul, err := unixsock.Listen("unixpacket", s.Socket, 0o600)
	if err != nil {
		return fmt.Errorf("lockcb: %w", err)
	}
	defer ul.Close()
	tl, err := net.Listen("tcp", s.Listen)
	if err != nil {
		return fmt.Errorf("lockcb: %w", err)
	}
	port := tl.Addr().(*net.TCPAddr).Port
	s.mu.Lock()
	s.port = port
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = sunrpc.ServeTCP(ctx, tl, s.rpcServer(), sunrpc.TCPOptions{})
	}()
	go func() {
		defer wg.Done()
		s.registerLoop(ctx, port)
	}()
	go func() { <-ctx.Done(); ul.Close() }()
	klog.InfoS("lock callback service: listening", "socket", s.Socket, "port", port)
	close(s.ready)
	for {
		c, err := ul.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			for pc := range s.conns {
				pc.c.Close()
			}
			s.mu.Unlock()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("lockcb: accept: %w", err)
		}
		pc := &peerConn{c: c, pending: map[uint32]chan uint32{}}
		s.mu.Lock()
		s.conns[pc] = struct{}{}
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(ctx, pc)
		}()
	}
}

// registerLoop keeps NLM v4 and NSM v1 registered at port while they are
// free in rpcbind, and unregisters them when ctx ends.
func (s *Service) registerLoop(ctx context.Context, port int) {
	progs := [][2]uint32{{nlm.Program, nlm.Version}, {nsm.Program, nsm.Version}}
	held := make([]bool, len(progs))
	t := time.NewTicker(s.Recheck)
	defer t.Stop()
	for {
		for i, pv := range progs {
			ok := Register(s.RPCBind, pv[0], pv[1], port)
			if ok != held[i] {
				klog.InfoS("lock callback service: rpcbind registration", "program", pv[0], "version", pv[1], "port", port, "held", ok)
			}
			held[i] = ok
		}
		select {
		case <-ctx.Done():
			for i, pv := range progs {
				if held[i] {
					Unregister(s.RPCBind, pv[0], pv[1], port)
				}
			}
			return
		case <-t.C:
		}
	}
}

// serveConn reads c's messages until it fails or ctx ends, then forgets c.
func (s *Service) serveConn(ctx context.Context, pc *peerConn) {
	defer func() {
		pc.c.Close()
		pc.mu.Lock()
		pc.closed = true
		for id, ch := range pc.pending {
			close(ch)
			delete(pc.pending, id)
		}
		pc.mu.Unlock()
		s.mu.Lock()
		delete(s.conns, pc)
		if pc.tag != "" && s.byTag[pc.tag] == pc {
			delete(s.byTag, pc.tag)
		}
		s.mu.Unlock()
	}()
	buf := make([]byte, MaxMessage+1)
	for {
		n, err := pc.c.Read(buf)
		if err != nil {
			return
		}
		m, err := Decode(buf[:n])
		if err != nil {
			klog.ErrorS(err, "lock callback service: closing a connection that sent a bad message")
			return
		}
		switch m.Kind {
		case KindHello:
			s.mu.Lock()
			if pc.tag != "" && s.byTag[pc.tag] == pc {
				delete(s.byTag, pc.tag)
			}
			pc.tag, pc.servers = m.Tag, m.Servers
			if m.Tag != "" {
				s.byTag[m.Tag] = pc
			}
			s.mu.Unlock()
			klog.V(2).InfoS("lock callback service: mount attached", "tag", m.Tag, "servers", m.Servers)
		case KindReply:
			pc.mu.Lock()
			ch := pc.pending[m.ID]
			delete(pc.pending, m.ID)
			pc.mu.Unlock()
			if ch != nil {
				ch <- m.Stat
			}
		case KindCall:
			// a lock server of this node relays a callback it received
			m.Args = append([]byte(nil), m.Args...)
			go func() {
				st, err := s.route(ctx, m.Prog, m.Proc, m.Peer, m.Args)
				r := Message{Kind: KindReply, ID: m.ID, Stat: uint32(st)}
				if err != nil {
					r.Stat = NotDelivered
				}
				_, _ = pc.c.Write(r.Marshal())
			}()
		}
	}
}

// call sends m to the process of pc and waits, bounded by ctx, for its
// answer.
func (pc *peerConn) call(ctx context.Context, m Message) (uint32, error) {
	m.ID = pc.nextID.Add(1)
	ch := make(chan uint32, 1)
	pc.mu.Lock()
	if pc.closed {
		pc.mu.Unlock()
		return 0, fmt.Errorf("%w: connection closed", ErrNotDelivered)
	}
	pc.pending[m.ID] = ch
	pc.mu.Unlock()
	defer func() {
		pc.mu.Lock()
		delete(pc.pending, m.ID)
		pc.mu.Unlock()
	}()
	if _, err := pc.c.Write(m.Marshal()); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNotDelivered, err)
	}
	select {
	case st, ok := <-ch:
		if !ok {
			return 0, fmt.Errorf("%w: connection closed", ErrNotDelivered)
		}
		return st, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("%w: %w", ErrNotDelivered, ctx.Err())
	}
}
