package rpcrdma

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nfsrdma/nfsrdma-csi/pkg/fairshare"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// Responder credit accounting (RFC 8166 section 3.3.1).
//
// Each connection posts only as many receives as it grants: one at accept
// (a requester may send one call before any reply, section 3.3.3), then,
// when a reply goes out, receives posted + calls received and not yet
// answered are raised to the grant it carries (receives posted before the
// reply) or, after a lower grant, let drain (receives not reposted as calls
// complete: a posted receive cannot be withdrawn).
// A requester that sends past its grant therefore finds no receive posted,
// and the RDMA layer ends the connection ("If the granted value is
// exceeded, the RDMA layer may signal an error, possibly terminating the
// connection", section 3.3.1): a pod cannot use more of the server than
// its grant, whatever it asks for in rdma_credit.
//
// Replies of one connection take their grant and are posted under one
// lock, so grants reach the requester in the order they were decided (a
// stale higher grant can never overtake a lower one).
//
// The grant of a connection is its target (its share of the grant of its
// AUTH_SYS machine name, SetMachineGrants, else the default, SetGrant), capped by
// ServerOptions.Credits and, when ServerOptions.Budget is set, by a max-min
// fair share of the server-wide receive budget; never below 1 (a zero
// grant would deadlock, section 3.3.1).

// connCredits is one connection's receive accounting.
type connCredits struct {
	mu     sync.Mutex
	grant  int // what replies carry now
	target int // before the budget
	// held is the receive buffers in use: posted, or holding a call
	// not yet answered or dropped; fillLocked keeps it at the grant.
	held int
	// working is the calls received and not yet answered or dropped
	// (posted = held - working). A receive completion only adds to it
	// (received, without mu), so the completion goroutine never waits
	// for the Send that finish posts under mu.
	working atomic.Int64
	idle    []int // slots whose receive is not posted (LIFO)
	// posts counts the receives ever posted: a version 2 connection's
	// rdma_credit is posts-1 (the draft's section 4.2.1; see the package
	// doc's Version 2 section).
	posts uint32
	// sent counts the messages Sent; peerLimit is the latest rdma_credit
	// of a version 2 requester (its receives posted, less one): a
	// continued reply is Sent only within it.
	sent      uint32
	peerLimit atomic.Uint32
	// called: a call arrived (version 2: until then, after the
	// RDMA2_CONNPROP exchange, the machine is unknown and one receive is
	// granted, so that a pod never starts with the default grant).
	called  atomic.Bool
	machine atomic.Pointer[string]
	named   bool // target comes from a machine grant
}

// ConnInfo describes one responder connection's credits.
type ConnInfo struct {
	Peer string
	// Machine is the AUTH_SYS machine name of the connection's latest
	// call that carried one ("" before), the key of SetMachineGrants.
	Machine string
	// Target is the grant before the budget: the connection's share of
	// its machine's grant when one is set (Named), else the default;
	// capped by Credits.
	Target int
	Named  bool
	// Grant is what replies carry (credits), Posted the receives posted,
	// InProcess the calls received and not yet answered. On a version 2
	// connection Grant is the calls it may have outstanding; its
	// rdma_credit counts Sends since the connection began, and one
	// receive more than Grant is posted for an RDMA2_GRANT.
	Grant, Posted, InProcess int
	// Version is the connection's RPC-over-RDMA version: 1 or 2, 0 before
	// its first message.
	Version int
	// Verbs is what the verbs provider negotiated when the connection was
	// accepted (for software iWARP the MPA revision, CRC, markers, ULPDU
	// at setup; IRD and ORD), without the private data; zero until the
	// accept completes.
	Verbs verbs.ConnInfo
}

// SetGrant changes the default grant (connections whose machine has no
// grant of its own), clamped to 1..Credits, and rebalances the budget.
// Replies sent after it carry the new grant.
func (s *Server) SetGrant(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.defGrant = min(max(n, 1), s.opts.Credits)
	s.retargetLocked()
}

// SetMachineGrants sets the credits granted to the connections of each
// AUTH_SYS machine name (RFC 5531 appendix A authsys_parms.machinename;
// the CSI node plugin names each pod's mount "NODE/NAMESPACE/POD"),
// replacing the previous set; a machine's grant is shared by its
// connections (retargetLocked), each clamped to 1..Credits.
// Connections of machines not in g get the default grant. A connection's
// machine is the one of its latest AUTH_SYS call: a requester that lies
// about it gets that machine's grant, the same trust AUTH_SYS gives its
// uid.
func (s *Server) SetMachineGrants(g map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.machineGrants = maps.Clone(g)
	s.retargetLocked()
}

// Connections describes each open connection's credits, sorted by peer.
func (s *Server) Connections() []ConnInfo {
	s.mu.Lock()
	out := make([]ConnInfo, 0, len(s.conns))
	for c := range s.conns {
		cc := &c.cred
		cc.mu.Lock()
		working := int(cc.working.Load())
		ci := ConnInfo{Peer: c.peerAddr(), Target: cc.target, Named: cc.named, Grant: cc.grant, Posted: max(cc.held-working-c.reserveLocked(), 0), InProcess: working, Verbs: c.verbs, Version: int(c.vers.Load())}
		cc.mu.Unlock()
		if m := cc.machine.Load(); m != nil {
			ci.Machine = *m
		}
		out = append(out, ci)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b ConnInfo) int { return strings.Compare(a.Peer, b.Peer) })
	return out
}

// retargetLocked sets every connection's target from its machine and
// rebalances. A machine's grant is shared by its connections: a pod that
// mounts k volumes of this server opens k connections under one machine
// name (k times nconnect with that mount option), and its grant bounds
// them together (max-min: grant/k each, the
// remainder one by one in peer order; at least 1 each). Connections of
// machines without a grant get the default each. s.mu is held.
func (s *Server) retargetLocked() {
	byMachine := map[string][]*srvConn{}
	for c := range s.conns {
		if m := c.cred.machine.Load(); m != nil {
			if _, ok := s.machineGrants[*m]; ok {
				byMachine[*m] = append(byMachine[*m], c)
				continue
			}
		}
		c.cred.setTarget(s.defGrant, false) // within 1..Credits (fill, SetGrant)
	}
	for m, cs := range byMachine {
		slices.SortFunc(cs, func(a, b *srvConn) int { return strings.Compare(a.peerAddr(), b.peerAddr()) })
		g := s.machineGrants[m]
		for i, c := range cs {
			t := g / len(cs)
			if i < g%len(cs) {
				t++
			}
			c.cred.setTarget(min(max(t, 1), s.opts.Credits), true)
		}
	}
	s.rebalanceLocked()
}

func (cc *connCredits) setTarget(t int, named bool) {
	cc.mu.Lock()
	cc.target, cc.named = t, named
	cc.mu.Unlock()
}

// peerAddr is c's remote address ("" when unknown).
func (c *srvConn) peerAddr() string {
	if c.addr == nil {
		return ""
	}
	return c.addr.String()
}

// rebalanceLocked sets every connection's grant: its target, or its max-min
// fair share of the budget when the targets exceed it. s.mu is held.
func (s *Server) rebalanceLocked() {
	conns := make([]*srvConn, 0, len(s.conns))
	targets := make([]int, 0, len(s.conns))
	for c := range s.conns {
		c.cred.mu.Lock()
		targets = append(targets, c.cred.target)
		c.cred.mu.Unlock()
		conns = append(conns, c)
	}
	grants := fairShares(targets, s.opts.Budget)
	total := 0
	for i, c := range conns {
		c.cred.mu.Lock()
		raised := grants[i] > c.cred.grant
		c.cred.grant = grants[i]
		if raised {
			c.sendGrantLocked()
		}
		c.cred.mu.Unlock()
		total += grants[i]
	}
	s.m.creditsGranted.Store(uint64(total))
}

// fairShares divides budget among targets by max-min fairness
// (fairshare.Divide, the remainder of an uneven split to the first);
// budget <= 0 means unbounded. A connection is never granted 0, since a
// requester with no credit could never send (RFC 8166 section 3.3.1): past
// one receive per connection the sum exceeds the budget.
func fairShares(targets []int, budget int) []int {
	if budget <= 0 {
		budget = -1
	}
	out := fairshare.Divide(targets, budget, 1)
	for i := range out {
		out[i] = max(out[i], 1)
	}
	return out
}

// learnMachine records the AUTH_SYS machine name of a call on c, and
// re-targets c when it changed.
func (c *srvConn) learnMachine(req *sunrpc.Request) {
	if req.Cred.Flavor != sunrpc.AuthSys {
		return
	}
	name := req.Cred.Sys.MachineName
	if m := c.cred.machine.Load(); m != nil && *m == name {
		return
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	name = strings.Clone(name)
	c.cred.machine.Store(&name)
	if _, ok := s.conns[c]; !ok {
		return
	}
	s.retargetLocked()
}

// received accounts a receive completed on c: a call now in process.
func (c *srvConn) received() {
	c.cred.working.Add(1) // and posted-1: held does not change
}

// finish ends the processing of the call in slot idx: it reposts receives
// up to the grant (this slot's first), then, when msg is not nil, writes
// the grant into msg's rdma_credit field (an encoded RPC-over-RDMA header,
// RFC 8166 section 4.2) and posts wr, the Send carrying msg, under the same
// lock, so that the Sends leave in the order of their credit values. A QP
// that can queue a Send (verbs.SendQueuer) transmits it after the lock is
// let go, with the replies of other calls queued meanwhile. It reports
// whether wr was posted; false with a nil msg.
func (c *srvConn) finish(idx int, msg []byte, wr *verbs.SendWR) bool {
	posted, push := c.finishLocked(idx, msg, wr)
	if push {
		c.sq.PushSends()
	}
	return posted
}

// finishLocked is finish under the credit lock; push reports a Send
// queued and not yet transmitted.
func (c *srvConn) finishLocked(idx int, msg []byte, wr *verbs.SendWR) (posted, push bool) {
	cc := &c.cred
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.held--
	cc.working.Add(-1)
	cc.idle = append(cc.idle, idx)
	c.releasePartsLocked(idx)
	if !c.fillLocked() {
		return false, false
	}
	if msg == nil {
		return false, false
	}
	be.PutUint32(msg[creditOffset:], c.creditLocked())
	cc.sent++
	if c.sq != nil {
		posted = c.sq.QueueSend(wr) == nil
		return posted, posted
	}
	return c.qp.PostSend(wr) == nil, false
}

// fillLocked posts idle receives until posted + in process reach the
// grant. It reports false, and closes the QP, when a post fails.
func (c *srvConn) fillLocked() bool {
	cc := &c.cred
	want := c.grantLocked() + c.reserveLocked()
	for cc.held < want && len(cc.idle) > 0 {
		i := cc.idle[len(cc.idle)-1]
		if err := c.postRecv(i); err != nil {
			c.qp.Close()
			return false
		}
		cc.idle = cc.idle[:len(cc.idle)-1]
		cc.held++
		cc.posts++
	}
	return true
}

// creditLocked is the rdma_credit of the next message c sends: version
// 1, the grant (RFC 8166 section 3.3.1); version 2, messages received
// plus the receives it advertises (the draft's section 4.2.1): those
// posted, less the one kept for an RDMA2_GRANT, and no more than the
// grant less the calls in process. posts - held is the messages received
// and not in process, so that is posts - max(1, held - grant): after a
// lower grant, receives posted under the higher one are not advertised,
// and the requester's window shrinks at once, as in version 1.
func (c *srvConn) creditLocked() uint32 {
	cc := &c.cred
	if c.vers.Load() == Version2 {
		return cc.posts - uint32(max(1, cc.held-c.grantLocked()))
	}
	return uint32(cc.grant)
}

// grantLocked is the calls c may have outstanding now: its grant, or 1
// on a version 2 connection before its first call.
func (c *srvConn) grantLocked() int {
	if !c.cred.called.Load() && c.vers.Load() == Version2 {
		return 1
	}
	return c.cred.grant
}

// reserveLocked is the receive a version 2 connection keeps posted beyond
// its grant for an RDMA2_GRANT (the draft's section 4.2.1.1); 0 for
// version 1.
func (c *srvConn) reserveLocked() int {
	if c.vers.Load() == Version2 {
		return 1
	}
	return 0
}

// removeConn forgets c and gives its share of the budget back.
func (s *Server) removeConn(c *srvConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.conns[c]; ok {
		delete(s.conns, c)
		s.retargetLocked()
	}
}

// sendGrantLocked tells a version 2 requester at once that its grant rose
// (the draft's section 4.2.1.1: RDMA2_GRANT, rdma_xid 0): it posts the
// receives of the new grant and Sends the credit. Without it the credit
// would reach the requester with the next reply, as in version 1, after a
// call waited for it. One RDMA2_GRANT is in flight at a time, from the
// connection's own buffer; while one is, the next reply carries the
// credit instead. c.cred.mu is held.
func (c *srvConn) sendGrantLocked() {
	cc := &c.cred
	if c.vers.Load() != Version2 || !cc.called.Load() || c.grantMR == nil || !c.grantIdle.CompareAndSwap(true, false) {
		return
	}
	if !c.fillLocked() {
		return
	}
	b := c.grantMR.Bytes()[:PrefixLen]
	be.PutUint32(b, 0)
	be.PutUint32(b[4:], Version2)
	be.PutUint32(b[8:], c.creditLocked())
	be.PutUint32(b[12:], uint32(HTypeGrant))
	c.grantSGE[0] = c.grantMR.SGE(0, PrefixLen)
	c.grantWR = verbs.SendWR{ID: wrGrant, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: c.grantSGE[:]}
	cc.sent++
	if c.qp.PostSend(&c.grantWR) == nil {
		c.s.m.grants.Add(1)
	}
}
