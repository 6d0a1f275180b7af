package rpcrdma

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// ServerOptions configures a responder. Zero fields take the defaults in
// brackets.
type ServerOptions struct {
	// Credits is the receive buffers of a connection: the most credits it
	// can be granted, and the most calls it processes at once [32].
	Credits int
	// Grant is the default rdma_credit granted in each reply, at most
	// Credits [Credits]; SetGrant changes it at run time, SetMachineGrants
	// sets it per AUTH_SYS machine name (see grants_responder.go).
	Grant int
	// Budget bounds the sum of the connections' grants (a server-wide
	// receive budget, as a shared receive queue would): when their targets
	// add up to more, each gets its max-min fair share, but every
	// connection gets at least 1, so the sum exceeds Budget when there are
	// more connections than Budget. Receives posted plus calls in process
	// converge to the grants as requesters use them (receives posted under
	// an older, higher grant drain only as calls arrive on them), and a
	// connection takes its share before it is accepted [0: no bound].
	Budget int
	// Inline is our send and receive size in bytes, advertised in RFC
	// 8797 private data [OurInline, 4096].
	Inline int
	// IRD and ORD offered at accept [16, 16]: ORD bounds the RDMA Reads
	// we have outstanding per connection to pull Read chunks.
	IRD, ORD int
	// MaxCall bounds, in bytes, what one call's Read chunks may carry
	// [1 MiB + 64 KiB]; larger is answered with ERR_CHUNK.
	MaxCall int
	// Limits bound the call headers we decode (RFC 8166 section 4.5.2).
	Limits Limits
	// MaxVersion is the highest RPC-over-RDMA version served: 2 (the
	// default) serves each connection in the version of the first
	// message it receives, 1 or 2 (the draft's section 4.3.3); 1 serves
	// version 1 only and answers version 2 with ERR_VERS (RFC 8166
	// section 4.5.1) [2].
	MaxVersion int
	// NoResponderReadChunks stops a version 2 connection from returning
	// a reply that fits neither inline nor the call's Reply chunk in a
	// responder-provided Read chunk (rprc_responder.go): it is then continued,
	// or answered RDMA2_ERR_REPLY_RESOURCE, as without the extension.
	NoResponderReadChunks bool
	// SendDDP announces our Receive Buffer Structure (a 1 KiB segment
	// for the header, then DDP-targetable pages; Inline must be a
	// multiple of 4096 and at least 8192) and accepts calls whose DDP-eligible
	// argument was placed by send-based DDP (sddp_responder.go); off by default
	// [false].
	SendDDP bool
	// NoRemoteInvalidate stops us from announcing that the requester may
	// invalidate our Read chunks with the Send With Invalidate carrying
	// its RDMA2_DONE (RPRCRemoteInv).
	NoRemoteInvalidate bool
	// ReadChunkTimeout is how long a responder-provided Read chunk stays
	// readable without an RDMA2_DONE before it is invalidated
	// [DefaultReadChunkTimeout, 10s].
	ReadChunkTimeout time.Duration
	Logger           *slog.Logger
}

func (o *ServerOptions) fill() error {
	if o.ReadChunkTimeout <= 0 {
		o.ReadChunkTimeout = DefaultReadChunkTimeout
	}
	if o.Credits <= 0 {
		o.Credits = 32
	}
	if o.Grant <= 0 || o.Grant > o.Credits {
		o.Grant = o.Credits
	}
	if o.Inline == 0 {
		o.Inline = OurInline
	}
	if o.Inline < MinInlineSize || o.Inline > MaxInlineSize || o.Inline%1024 != 0 {
		return fmt.Errorf("%w: inline size %d (RFC 8797: 1024..262144, multiple of 1024)", ErrInvalid, o.Inline)
	}
	if o.IRD <= 0 {
		o.IRD = 16
	}
	if o.ORD <= 0 {
		o.ORD = 16
	}
	if o.MaxCall <= 0 {
		o.MaxCall = 1<<20 + 64<<10
	}
	switch o.MaxVersion {
	case 0:
		o.MaxVersion = Version2
	case Version, Version2:
	default:
		return fmt.Errorf("%w: RPC-over-RDMA version %d (1 or 2)", ErrInvalid, o.MaxVersion)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Server is an RPC-over-RDMA responder listening on one address: version
// 1 (RFC 8166 section 3) and, unless ServerOptions.MaxVersion is 1,
// version 2 (the draft), each connection in the version of its first
// message.
type Server struct {
	dev  verbs.Device
	ln   verbs.Listener
	opts ServerOptions
	m    metrics

	recent recentXIDs

	// copyPayload: the device cannot register a read-only file mapping
	// (verbs.ProbeFileMR at Serve) or refused to register a reply's
	// payload in place (reply), so payloads are registered as copies.
	copyPayload atomic.Bool

	mu            sync.Mutex
	conns         map[*srvConn]struct{}
	defGrant      int            // SetGrant
	machineGrants map[string]int // SetMachineGrants
	// forceRPRC (tests) makes replies that need it use a responder-
	// provided Read chunk even where the requester did not announce them.
	forceRPRC bool
	// mangleReplySDDP (tests) alters the placement of RDMA2_REPLY_SDDP.
	mangleReplySDDP atomic.Pointer[func(*SDDP)]
	// replyXNum (tests) gives the rdma_xnum of a reply group's i-th Send.
	replyXNum atomic.Pointer[func(int) uint32]
	// forceXmitErr (tests) replaces the body of the RDMA2_XMTERR sent.
	forceXmitErr atomic.Pointer[XmitErr]
}

// xidKey names a call for retransmission counting: the requester's host
// (a retransmission comes on a new connection, from a new port) and XID.
type xidKey struct {
	host netip.Addr
	xid  uint32
}

// callKey returns the xidKey of call xid on connection c.
func (c *srvConn) callKey(xid uint32) xidKey {
	var host netip.Addr
	if ta, ok := c.addr.(*net.TCPAddr); ok {
		host = ta.AddrPort().Addr().Unmap()
	}
	return xidKey{host: host, xid: xid}
}

// recentXIDs remembers the last calls (host and XID), about the last
// xidShards*xidShardLen of them, to count retransmissions; the same XID
// from two hosts is two calls. The calls are spread over shards by XID,
// each with its own lock and its last xidShardLen calls, so that calls on
// different connections seldom wait for each other and a lookup is a scan
// of a few dozen XIDs rather than a map's hashing and upkeep.
type recentXIDs struct {
	shards [xidShards]xidShard
}

const (
	xidShards   = 64 // a power of 2
	xidShardLen = 64
)

type xidShard struct {
	mu    sync.Mutex
	n     int // calls recorded
	xids  [xidShardLen]uint32
	hosts [xidShardLen]netip.Addr
}

// seen reports whether x is among the recent calls, and records it if not.
func (r *recentXIDs) seen(x xidKey) bool {
	sh := &r.shards[x.xid&(xidShards-1)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range min(sh.n, xidShardLen) {
		if sh.xids[i] == x.xid && sh.hosts[i] == x.host {
			return true
		}
	}
	i := sh.n % xidShardLen
	sh.xids[i], sh.hosts[i] = x.xid, x.host
	sh.n++
	return false
}

// Listen starts listening for RPC-over-RDMA connections on addr
// ("host:port"; NFS uses 20049). Serve accepts them.
func Listen(ctx context.Context, dev verbs.Device, addr string, opts ServerOptions) (*Server, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	ln, err := dev.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	s := &Server{dev: dev, ln: ln, opts: opts, conns: map[*srvConn]struct{}{}, defGrant: opts.Grant}
	return s, nil
}

// Addr is the listening address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Metrics returns a snapshot of the counters over all connections.
func (s *Server) Metrics() Metrics { return s.m.snapshot() }

// Close stops listening; Serve returns after closing its connections.
func (s *Server) Close() error { return s.ln.Close() }

// CloseConnections disconnects every connection (the listener stays): a
// requester sees its connection lost and redials.
func (s *Server) CloseConnections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.qp.Close()
	}
}

// Serve accepts connections and dispatches their calls to d until ctx
// ends or Close; it then disconnects every connection, waits for their
// goroutines and returns the cause (ctx's error, or the listener's).
func (s *Server) Serve(ctx context.Context, d sunrpc.Dispatcher) error {
	s.probePayloads()
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		s.ln.Close()
		s.CloseConnections()
		wg.Wait()
	}()
	for {
		req, err := s.ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		c, err := s.newConn(ctx, req)
		if err != nil {
			s.opts.Logger.Warn("rpcrdma: accept failed", "peer", req.RemoteAddr(), "err", err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run(ctx, d)
		}()
	}
}

// probePayloads finds out whether the device registers read-only shared
// file mappings (verbs.ProbeFileMR), as a reply's payload is when the
// upper layer answers READ from the page cache; when it cannot, payloads
// are registered as copies from the first reply on, and the log says so
// once.
func (s *Server) probePayloads() {
	pd, err := s.dev.AllocPD()
	if err == nil {
		err = verbs.ProbeFileMR(pd)
		pd.Close()
	}
	if err != nil {
		s.copyPayload.Store(true)
		s.opts.Logger.Warn("rpcrdma: the device cannot register file mappings; reply payloads are registered as copies", "err", err)
	}
}

// srvConn is one responder connection.
type srvConn struct {
	cqd cqDrain
	s   *Server
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
	// sq is qp when it can queue a Send to transmit later (finish).
	sq     verbs.SendQueuer
	peer   PrivateData
	peerOK bool
	// inline is the requester's receive size: our send threshold (RFC
	// 8797 private data; version 2: its RDMA2_PROPID_RBSIZ).
	inline atomic.Int64
	addr   net.Addr
	// vers is the connection's version: 0 until the first message of a
	// version served arrives, then 1 or 2 (the draft's section 4.3.3).
	vers atomic.Uint32
	// Version 2 transport properties: propsDone once the requester's
	// RDMA2_CONNPROP_FINAL was processed; props what it announced.
	propsMu   sync.Mutex
	propsDone bool
	props     Properties
	peerProps []Prop     // accumulated from RDMA2_CONNPROP_MIDDLE
	recvSeq   uint32     // receives completed, counted by the completion goroutine
	asm       reassembly // a continued call being received (completion goroutine)
	grp       group      // a send-based DDP transmission group being received (completion goroutine)
	// RDMA2_GRANT: its buffer, and whether no GRANT is in flight.
	grantMR   verbs.MR
	grantSGE  [1]verbs.SGE
	grantWR   verbs.SendWR
	grantIdle atomic.Bool
	verbs     verbs.ConnInfo // what the provider negotiated at accept; under s.mu

	sendMR, recvMR verbs.MR
	recv           recvLayout // of the receives in recvMR
	slots          []srvSlot
	recvWRs        []verbs.RecvWR // one per receive buffer, prebuilt
	recvSGEs       []verbs.SGE
	readSem        chan struct{} // ORD tokens
	done           chan struct{}
	// stopDrain ends the completion goroutine (run's context); set by
	// run before its workers start.
	stopDrain context.CancelFunc
	cred      connCredits
	exp       exposures // responder-provided Read chunks (rprc_responder.go)
	// Send-based DDP of replies (sddp_responder.go): the requester's window,
	// set once by its RDMA2_CONNPROP_FINAL, before any call.
	sddpOn    bool
	sddpWin   ddpWindow
	sddpLimit int
}

// srvSlot processes the call that arrived in receive buffer idx.
type srvSlot struct {
	c    *srvConn
	idx  int
	work chan int // byte length of a received call
	seq  uint32   // version 2: the message's number on the connection, from 1
	// Version 2 continuation, set by reassemble: asm holds the parts of
	// the call before this message (assembled), or contErr tells that
	// this message broke a continuation (RDMA2_ERR_INVAL_CONT).
	asm       []byte
	assembled bool
	contErr   bool
	asmLast   uint32 // the last RDMA2_CALL_MIDDLE's rdma_remaining
	// A send-based DDP transmission group (sddpgroup.go), set by
	// groupPart: the receives held for the Sends before this one
	// (released by finish), the argument's pieces, or the Transmit Error
	// this message is answered with.
	parts  []heldPart
	sends  [][]byte // the held receives' bytes
	vec    [][]byte
	xmtErr *XmitErr
	// A continued reply: its Payload stream, and its Sends in a
	// slot-owned region.
	stream   []byte
	contMR   verbs.MR
	contWRs  []verbs.SendWR
	contSGEs []verbs.SGE
	contMsgs [][]byte
	readDone chan struct{} // RDMA Read completed
	sendDone chan struct{} // reply Send completed
	invKey   uint32        // the STag the message's Send With Invalidate invalidated, 0 if none

	hdr, rep Header
	req      sunrpc.Request
	b        sunrpc.Builder
	bbuf     []byte
	msg      []byte   // the message being handled, in its receive buffer
	readMR   verbs.MR // sink of Read chunks
	streamMR verbs.MR // source of a Reply chunk
	tbsn     []uint32 // a send-based DDP reply's segment numbers
	sge      [3]verbs.SGE
	wr       verbs.SendWR
}

// newConn builds a connection's QP and buffers, posts its receives, then
// accepts req with our private data (RFC 8797).
func (s *Server) newConn(ctx context.Context, req verbs.ConnRequest) (*srvConn, error) {
	o := &s.opts
	var err error
	c := &srvConn{s: s, addr: req.RemoteAddr(), done: make(chan struct{}), readSem: make(chan struct{}, o.ORD)}
	ok := false
	defer func() {
		if !ok {
			_ = req.Reject(nil)
			s.removeConn(c)
			c.release()
		}
	}()
	c.peer, c.peerOK = parsePrivateData(req.PrivateData())
	local := PrivateData{SendSize: o.Inline, RecvSize: o.Inline}
	send, _ := negotiateInline(local, c.peer)
	c.inline.Store(int64(send))
	if c.pd, err = s.dev.AllocPD(); err != nil {
		return nil, err
	}
	// One receive buffer more than Credits: the one a version 2
	// connection keeps posted beyond its grant for an RDMA2_GRANT (the
	// draft's section 4.2.1.1).
	// The send queue holds, beyond the replies and their RDMA Writes and
	// Reads, the local invalidates of up to 2n responder-provided Read
	// chunks.
	n := o.Credits + 1
	if c.cq, err = s.dev.CreateCQ(6*n + 16); err != nil {
		return nil, err
	}
	c.cqd = cqDrain{cq: c.cq, complete: c.complete}
	if c.qp, err = c.pd.CreateQP(verbs.QPAttr{SendCQ: c.cq, RecvCQ: c.cq, MaxSendWR: 6*n + 4, MaxRecvWR: n, MaxSGE: 4}); err != nil {
		return nil, err
	}
	c.sq, _ = c.qp.(verbs.SendQueuer)
	if c.sendMR, err = s.reg(c.pd, make([]byte, n*o.Inline), 0); err != nil {
		return nil, err
	}
	c.recv = newRecvLayout(o.Inline, o.SendDDP)
	if c.recvMR, err = s.reg(c.pd, c.recv.region(n), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if c.grantMR, err = s.reg(c.pd, make([]byte, PrefixLen), 0); err != nil {
		return nil, err
	}
	c.grantIdle.Store(true)
	c.slots = make([]srvSlot, n)
	c.recvWRs, c.recvSGEs = make([]verbs.RecvWR, n), make([]verbs.SGE, n)
	for i := range c.slots {
		c.recvSGEs[i] = c.recv.sge(c.recvMR, i)
		c.recvWRs[i] = verbs.RecvWR{ID: wrRecv | uint64(i), SGL: c.recvSGEs[i : i+1 : i+1]}
		sl := &c.slots[i]
		sl.c, sl.idx = c, i
		sl.work = make(chan int, 1)
		sl.readDone, sl.sendDone = make(chan struct{}, 1), make(chan struct{}, 1)
		sl.bbuf = make([]byte, 0, o.Inline)
	}
	// One receive: a requester may send one call before a reply gives it
	// credits (RFC 8166 section 3.3.3); finish posts up to the grant.
	for i := n - 1; i >= 1; i-- {
		c.cred.idle = append(c.cred.idle, i)
	}
	if err = c.postRecv(0); err != nil {
		return nil, err
	}
	c.cred.held, c.cred.posts = 1, 1
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.retargetLocked()
	s.mu.Unlock()
	pdata, err := local.Append(nil)
	if err != nil {
		return nil, err
	}
	info, err := req.Accept(ctx, c.qp, verbs.ConnParam{PrivateData: pdata, ResponderResources: o.IRD, InitiatorDepth: o.ORD})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	c.verbs = info
	c.verbs.PrivateData = nil
	s.mu.Unlock()
	if info.ORD < cap(c.readSem) {
		// The requester's IRD bounds our RDMA Reads (ORD as negotiated).
		c.readSem = make(chan struct{}, max(info.ORD, 1))
	}
	s.m.connections.Add(1)
	ok = true
	return c, nil
}

func (c *srvConn) postRecv(i int) error {
	return c.qp.PostRecv(&c.recvWRs[i])
}

func (c *srvConn) release() {
	s := c.s
	if c.qp != nil {
		c.qp.Close()
	}
	c.releaseExposures()
	for i := range c.slots {
		s.dereg(c.slots[i].readMR)
		s.dereg(c.slots[i].streamMR)
		s.dereg(c.slots[i].contMR)
	}
	s.dereg(c.sendMR)
	s.dereg(c.recvMR)
	s.dereg(c.grantMR)
	if c.cq != nil {
		c.cq.Close()
	}
	if c.pd != nil {
		c.pd.Close()
	}
}

// run is the connection's completion goroutine; one worker per receive
// buffer processes the calls (concurrency bounded by Credits).
func (c *srvConn) run(ctx context.Context, d sunrpc.Dispatcher) {
	lctx, cancel := context.WithCancel(ctx)
	c.stopDrain = cancel
	var wg sync.WaitGroup
	for i := range c.slots {
		wg.Add(1)
		go func(sl *srvSlot) {
			defer wg.Done()
			for n := range sl.work {
				sl.handle(ctx, d, n)
			}
		}(&c.slots[i])
	}
	go func() {
		select {
		case <-c.qp.Done():
		case <-lctx.Done():
		}
		cancel()
	}()
	c.cqd.run(lctx, cancel) // ends at an error completion or when the QP fails
	cancel()
	c.qp.Close()
	close(c.done)
	for i := range c.slots {
		close(c.slots[i].work)
	}
	wg.Wait()
	c.s.removeConn(c)
	c.s.m.connections.Add(-1)
	c.release()
}

func (c *srvConn) complete(wc *verbs.WC) bool {
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCFlushErr {
			c.s.opts.Logger.Warn("rpcrdma: work request failed", "peer", c.addr, "status", wc.Status, "opcode", wc.Opcode, "err", wc.Err)
		}
		return false
	}
	idx := int(wc.ID &^ wrKindMask)
	if wc.ID&wrKindMask == wrGrant {
		c.grantIdle.Store(true)
		return true
	}
	if wc.ID&wrKindMask == wrInv {
		c.fenced(idx) // a responder-provided Read chunk invalidated
		return true
	}
	if idx >= len(c.slots) {
		return true
	}
	sl := &c.slots[idx]
	switch wc.ID & wrKindMask {
	case wrRecv:
		c.received()
		c.recvSeq++
		sl.seq = c.recvSeq
		sl.invKey = 0
		if wc.Flags&verbs.WCWithInv != 0 {
			sl.invKey = wc.InvalidatedKey
		}
		if c.vers.Load() == Version2 && c.reassemble(sl, int(wc.ByteLen)) {
			return true // a part of a continued call, kept; its receive reposted
		}
		sl.work <- int(wc.ByteLen) // the slot is idle: its receive was posted
	case wrRead:
		sl.readDone <- struct{}{}
	case wrSend:
		sl.sendDone <- struct{}{}
	}
	return true
}

// wait waits for a completion on ch or the connection's end.
func (c *srvConn) wait(ch chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-c.done:
		return sunrpc.ErrConnLost
	}
}

// handle processes one received message of n bytes in receive buffer sl.idx.
func (sl *srvSlot) handle(ctx context.Context, d sunrpc.Dispatcher, n int) {
	c, s := sl.c, sl.c.s
	msg := c.recv.buf(c.recvMR, sl.idx)[:n]
	sl.msg = msg
	if c.version(msg) == Version2 {
		sl.handle2(ctx, d, msg)
		return
	}
	hl, err := sl.hdr.Decode(msg, &s.opts.Limits)
	if err == nil {
		err = sl.hdr.CheckCall()
	}
	if err != nil {
		if shouldAnswer(msg, err) {
			sl.sendError(msg, err)
			return
		}
		s.opts.Logger.Debug("rpcrdma: message discarded", "peer", c.addr, "err", err)
		c.finish(sl.idx, nil, nil)
		return
	}
	sl.serve(ctx, d, msg, hl)
}

// serve processes the decoded call in msg, whose header (sl.hdr) is hl
// bytes long: it pulls the Read chunks, dispatches the call and replies.
func (sl *srvSlot) serve(ctx context.Context, d sunrpc.Dispatcher, msg []byte, hl int) {
	c, s := sl.c, sl.c.s
	if !c.cred.called.Load() {
		c.cred.mu.Lock() // grantLocked reads it under mu
		c.cred.called.Store(true)
		c.cred.mu.Unlock()
	}
	s.m.calls.Add(1)
	s.m.creditsInUse.Add(1)
	defer s.m.creditsInUse.Add(-1)
	if s.recent.seen(c.callKey(sl.hdr.XID)) {
		s.m.retransmits.Add(1)
	}

	inline := msg[hl:]
	if sl.assembled {
		if uint32(len(inline)) != sl.asmLast {
			sl.sendError(msg, fmt.Errorf("%w: the final part has %d bytes, rdma_remaining said %d", ErrCont, len(inline), sl.asmLast))
			return
		}
		sl.asm = append(sl.asm, inline...)
		inline = sl.asm
		s.m.continued.Add(1)
	}
	var raw, arg []byte
	var vec [][]byte
	var err error
	if sl.hdr.Vers == Version2 && sl.hdr.HType == HTypeCallSDDP && !sl.assembled && len(sl.parts) > 0 {
		raw, vec, err = sl.locateGroup(msg, hl)
	} else if sl.hdr.Vers == Version2 && sl.hdr.HType == HTypeCallSDDP && !sl.assembled {
		raw, arg, err = sl.locateSDDP(msg, hl)
	} else {
		raw, arg, err = sl.pull(inline)
	}
	if err != nil {
		if errors.Is(err, sunrpc.ErrConnLost) {
			return
		}
		sl.sendError(msg, err)
		return
	}
	sl.req.Reset(raw, arg, c.addr, "rdma")
	sl.req.ArgPayloadVec = vec
	sl.b.Reset(sl.bbuf[:0])
	ok := d.Dispatch(ctx, &sl.req, &sl.b)
	c.learnMachine(&sl.req)
	if !ok {
		sl.b.RunAfterSend()
		c.finish(sl.idx, nil, nil)
		return
	}
	sl.reply(msg)
	if b := sl.b.Bytes(); cap(b) > cap(sl.bbuf) && cap(b) <= 1<<20 {
		sl.bbuf = b[:0] // keep a grown reply buffer, up to 1 MiB
	}
}

// pull returns the call's Payload stream and its DDP-eligible argument,
// RDMA Reading the Read chunks (RFC 8166 sections 3.5.2, 3.5.3). Errors
// wrap ErrChunk (answered ERR_CHUNK) or sunrpc.ErrConnLost.
func (sl *srvSlot) pull(inline []byte) (raw, arg []byte, err error) {
	h := &sl.hdr
	chunk, rest := nextReadChunk(h.Reads)
	if len(rest) != 0 {
		return nil, nil, &HeaderError{Kind: ErrReadChunks, Reason: "more than one Read chunk", Max: 1}
	}
	if len(chunk) == 0 {
		return inline, nil, h.CheckXID(inline)
	}
	total := readChunkLen(chunk)
	if total > uint64(sl.c.s.opts.MaxCall) {
		// Refused before any RDMA Read (the draft's section 11.1.4):
		// ERR_CHUNK in version 1, RDMA2_ERR_SYSTEM in version 2.
		return nil, nil, &systemError{fmt.Errorf("%w: Read chunk of %d bytes exceeds %d", ErrChunk, total, sl.c.s.opts.MaxCall)}
	}
	if h.Proc == ProcMsg {
		if err := h.CheckXID(inline); err != nil {
			return nil, nil, err
		}
		if p := chunk[0].Position; p%4 != 0 || uint64(p) > uint64(len(inline)) || p < 4 {
			return nil, nil, fmt.Errorf("%w: Read chunk position %d in an inline stream of %d bytes", ErrChunk, p, len(inline))
		}
	}
	if err := sl.read(chunk, int(total)); err != nil {
		return nil, nil, err
	}
	b := sl.readMR.Bytes()[:total]
	if h.Proc == ProcNoMsg {
		return b, nil, h.CheckXID(b)
	}
	if total == 0 {
		b = []byte{}
	}
	return inline, b, nil
}

// read pulls the segments of chunk (total bytes) into sl.readMR, one RDMA
// Read per segment, at most ORD outstanding on the connection.
func (sl *srvSlot) read(chunk []ReadSegment, total int) error {
	c, s := sl.c, sl.c.s
	if total == 0 {
		return nil
	}
	if sl.readMR == nil || sl.readMR.Len() < total {
		s.dereg(sl.readMR)
		sl.readMR = nil
		mr, err := s.reg(c.pd, make([]byte, max(total, 64<<10)), verbs.AccessLocalWrite)
		if err != nil {
			return fmt.Errorf("%w: %v", sunrpc.ErrConnLost, err)
		}
		sl.readMR = mr
	}
	off := 0
	for _, rs := range chunk {
		if rs.Length == 0 {
			continue
		}
		select {
		case c.readSem <- struct{}{}:
		case <-c.done:
			return sunrpc.ErrConnLost
		}
		sl.sge[0] = sl.readMR.SGE(off, int(rs.Length))
		sl.wr = verbs.SendWR{ID: wrRead | uint64(sl.idx), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: sl.sge[:1], RemoteAddr: rs.Offset, RKey: rs.Handle}
		err := c.qp.PostSend(&sl.wr)
		if err == nil {
			err = c.wait(sl.readDone)
		}
		<-c.readSem
		if err != nil {
			return fmt.Errorf("%w: RDMA Read: %v", sunrpc.ErrConnLost, err)
		}
		off += int(rs.Length)
	}
	if sl.hdr.Proc == ProcNoMsg {
		s.m.posZero.Add(1)
	} else {
		s.m.readChunks.Add(1)
	}
	s.m.readChunkBytes.Add(uint64(total))
	return nil
}

// sendError answers msg with RDMA_ERROR (RFC 8166 section 4.5).
func (sl *srvSlot) sendError(msg []byte, err error) {
	c, s := sl.c, sl.c.s
	in := s.opts.Inline
	buf := c.sendMR.Bytes()[sl.idx*in:][:0:in]
	var b []byte
	var xe *XmitErr
	if c.vers.Load() == Version2 && errors.As(err, &xe) {
		if f := s.forceXmitErr.Load(); f != nil {
			xe = f
		}
		h := Header{XID: be.Uint32(msg), Vers: Version2, Credits: 1, Header2: Header2{HType: HTypeXmitErr, XmitErr: *xe}}
		b, _ = h.Encode(buf) // a known code: it encodes
		s.m.xmitErrs.Add(1)
	} else if c.vers.Load() == Version2 {
		e := sl.error2(err)
		b = appendError2(buf, be.Uint32(msg), be.Uint32(msg[4:]), 1, e)
		s.m.countError2(e.Code)
	} else {
		b = appendErrorReply(buf, msg, err, 1) // rdma_credit set by finish
		if errors.Is(err, ErrVers) {
			s.m.errVers.Add(1)
		} else {
			s.m.errChunk.Add(1)
		}
	}
	sl.sge[0] = c.sendMR.SGE(sl.idx*in, len(b))
	sl.wr = verbs.SendWR{ID: wrSend | uint64(sl.idx), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sl.sge[:1]}
	if c.finish(sl.idx, b, &sl.wr) {
		_ = c.wait(sl.sendDone)
	}
}

// reply returns the dispatched reply within the call's chunks (planReply,
// BuildReply); ERR_CHUNK when it does not fit.
func (sl *srvSlot) reply(msg []byte) {
	c, s := sl.c, sl.c.s
	defer sl.b.RunAfterSend()
	defer sl.payloadFault(guardPayload())
	m := sl.b.Message()
	rm := Message{Head: len(m.Head), Tail: len(m.Tail)}
	if m.HasPayload {
		rm.Payload, rm.DDP = len(m.Payload), true
	}
	if sl.hdr.Vers == Version2 && rm.Payload > c.sddpWin.Size && rm.Len()+MinReply2Len > int(c.inline.Load()) && sl.replySDDPGroup(&m, rm) {
		// Larger than one Send, and no Write chunk offered: a
		// transmission group (sddpgroup.go), before planReply's error.
		return
	}
	p, err := planReply(rm, &sl.hdr, int(c.inline.Load()))
	if err != nil {
		if errors.Is(err, ErrChunk) {
			if sl.hdr.Vers == Version2 {
				// The rprc draft's section 4.1.1: a responder-provided
				// Read chunk when negotiated, else (the draft's
				// section 6.6.4) Message Continuation when the chunks
				// provided are not adequate.
				if c.rprcOn() && sl.replyRead(&m, rm) {
					return
				}
				if sl.replyContinued(&m, rm) {
					return
				}
				err = resourceErr(rm, &sl.hdr, err)
			}
			sl.sendError(msg, err)
		} else {
			s.opts.Logger.Warn("rpcrdma: reply dropped", "peer", c.addr, "err", err)
			c.finish(sl.idx, nil, nil)
		}
		return
	}
	var payMR verbs.MR
	defer func() { s.dereg(payMR) }()
	if p.Write && p.WriteLen > 0 {
		// Not every provider registers every memory: Linux before 6.2
		// pins a region without write access with FOLL_WRITE and
		// FOLL_FORCE (ib_umem_get), which the read-only shared mapping
		// of a file (the NFS server's READ) refuses with EFAULT. After
		// the first refusal a copy is registered, without trying in
		// place again (a fault reading the mapping is recovered by
		// payloadFault).
		inPlace := !s.copyPayload.Load()
		if inPlace {
			if payMR, err = s.reg(c.pd, m.Payload, 0); err != nil {
				s.copyPayload.Store(true)
				s.opts.Logger.Warn("rpcrdma: the device cannot register reply payloads in place; registering copies", "err", err)
			}
		}
		if !inPlace || err != nil {
			payMR, err = s.reg(c.pd, append([]byte(nil), m.Payload...), 0)
		}
		if err != nil {
			c.qp.Close()
			return
		}
		if !sl.write(sl.hdr.Writes[0], payMR, 0, p.WriteLen) {
			return
		}
		s.m.writeChunks.Add(1)
		s.m.writeChunkBytes.Add(uint64(p.WriteLen))
	}
	withPayload := m.HasPayload && !p.Write
	if p.Proc == ProcNoMsg {
		if sl.streamMR == nil || sl.streamMR.Len() < p.ReplyLen {
			s.dereg(sl.streamMR)
			sl.streamMR = nil
			if sl.streamMR, err = s.reg(c.pd, make([]byte, max(p.ReplyLen, 64<<10)), 0); err != nil {
				c.qp.Close()
				return
			}
		}
		b := appendStream(sl.streamMR.Bytes()[:0], &m, withPayload)
		if !sl.write(sl.hdr.Reply, sl.streamMR, 0, len(b)) {
			return
		}
		s.m.replyChunks.Add(1)
		s.m.replyChunkBytes.Add(uint64(len(b)))
	}
	sl.rep.BuildReply(&sl.hdr, p, 1) // rdma_credit set by finish
	if sl.hdr.Vers == Version2 {
		sl.rep.Vers, sl.rep.HType = Version2, HTypeReplyExternal
		if p.Proc == ProcMsg {
			// RDMA2_REPLY_INLINE has no Reply chunk to echo.
			sl.rep.HType, sl.rep.Reply, sl.rep.HasReply = HTypeReplyInline, sl.rep.Reply[:0], false
		}
	}
	in := s.opts.Inline
	buf := c.sendMR.Bytes()[sl.idx*in:][:0:in]
	var b []byte
	if p.Proc == ProcMsg && withPayload && sl.hdr.Vers == Version2 && c.sddpOn && len(m.Payload) >= PageSize {
		b = sl.replySDDP(&m, buf[:in]) // the whole message, or nil
	}
	sddp := b != nil
	if !sddp {
		b, err = sl.rep.Encode(buf)
	}
	if err != nil || !sddp && len(b)+p.InlineLen > in {
		s.opts.Logger.Warn("rpcrdma: reply header", "peer", c.addr, "err", err)
		c.qp.Close()
		return
	}
	if p.Proc == ProcMsg && !sddp {
		b = appendStream(b, &m, withPayload)
	}
	if p.Proc == ProcMsg {
		s.m.inlineMsgs.Add(1)
	}
	s.m.inlineBytes.Add(uint64(len(b)))
	wr := &sl.wr
	// Signaled, and waited for: the receive is reposted first, so the next
	// call may land in it and reuse this slot's send buffer and Reply chunk
	// source before an unsignaled Send or Write would have gone out; and the
	// caller's payload must stay registered until its Writes completed
	// (they complete before the Send).
	*wr = verbs.SendWR{ID: wrSend | uint64(sl.idx), Opcode: verbs.WRSend, Flags: verbs.SendSignaled}
	if key, ok := sl.invalidateKey(); ok {
		wr.Opcode, wr.InvalidateKey = verbs.WRSendWithInv, key
		s.m.sendInv.Add(1)
	}
	sl.sge[0] = c.sendMR.SGE(sl.idx*in, len(b))
	wr.SGL = sl.sge[:1]
	// The next call may come as soon as the reply lands: finish posts the
	// receives first.
	s.m.replies.Add(1)
	if c.finish(sl.idx, b, wr) {
		// The Send's completion is usually in the CQ already: take it
		// here rather than park until the completion goroutine passes
		// it on (one wake-up less per reply).
		c.cqd.take(c.stopDrain)
		_ = c.wait(sl.sendDone)
	}
}

// appendStream appends the reply's Payload stream: Head, the item and its
// pad when it stays in the stream, Tail.
func appendStream(b []byte, m *sunrpc.Message, withPayload bool) []byte {
	b = append(b, m.Head...)
	if withPayload {
		b = append(b, m.Payload...)
		b = append(b, zero4[:xdr.Pad(len(m.Payload))]...)
	}
	return append(b, m.Tail...)
}

// write RDMA Writes n bytes of src from offset off into the segments of
// chunk, in order, never past a segment's length (the caller checked n
// against the chunk with planReply). It reports false when the
// connection failed.
func (sl *srvSlot) write(chunk []Segment, src verbs.MR, off, n int) bool {
	c := sl.c
	for _, seg := range chunk {
		if n == 0 {
			break
		}
		l := min(n, int(seg.Length))
		if l == 0 {
			continue
		}
		sl.sge[0] = src.SGE(off, l)
		sl.wr = verbs.SendWR{ID: wrWrite | uint64(sl.idx), Opcode: verbs.WRRDMAWrite, SGL: sl.sge[:1],
			RemoteAddr: seg.Offset, RKey: seg.Handle}
		if err := c.qp.PostSend(&sl.wr); err != nil {
			c.qp.Close()
			return false
		}
		off += l
		n -= l
	}
	return true
}

// invalidateKey reports the R_key to invalidate with Send With
// Invalidate, if any. Version 1: the call's single R_key when the
// requester offered Remote Invalidation in its RFC 8797 private data.
// Version 2: the call's rdma_inv_handle when it names one of the call's
// R_keys (the draft's section 6.5); any other value is ignored, since it
// would invalidate memory the call did not expose.
func (sl *srvSlot) invalidateKey() (uint32, bool) {
	h := &sl.hdr
	if h.Vers != Version2 {
		key, ok := sl.oneKey()
		return key, ok && sl.c.peer.RemoteInvalidate
	}
	k := h.InvHandle
	if k == 0 {
		return 0, false
	}
	for _, r := range h.Reads {
		if r.Handle == k {
			return k, true
		}
	}
	for _, w := range h.Writes {
		for _, s := range w {
			if s.Handle == k {
				return k, true
			}
		}
	}
	for _, s := range h.Reply {
		if s.Handle == k {
			return k, true
		}
	}
	return 0, false
}

// oneKey reports the requester's single R_key when the call offered
// exactly one (RFC 8797 Remote Invalidation is used only then, as Linux
// svcrdma's svc_rdma_get_inv_rkey).
func (sl *srvSlot) oneKey() (uint32, bool) {
	var key uint32
	n := 0
	see := func(k uint32) {
		if n == 0 || k != key {
			key = k
			n++
		}
	}
	for _, r := range sl.hdr.Reads {
		see(r.Handle)
	}
	for _, w := range sl.hdr.Writes {
		for _, s := range w {
			see(s.Handle)
		}
	}
	for _, s := range sl.hdr.Reply {
		see(s.Handle)
	}
	return key, n == 1
}

var zero4 [4]byte
