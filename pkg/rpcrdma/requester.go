package rpcrdma

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// ClientOptions configures a requester connection. Zero fields take the
// defaults in brackets.
type ClientOptions struct {
	// Credits is the most calls the requester keeps outstanding, whatever
	// the responder grants, and what it asks for in rdma_credit [32]. It
	// sizes the send and receive buffer pools: Credits x Inline bytes each.
	Credits int
	// Inline is our send and receive size, in bytes, advertised in RFC 8797
	// private data [OurInline, 4096]; 1024..262144, a multiple of 1024.
	Inline int
	// MaxReply is the largest reply, in bytes, without a DDP-eligible
	// result, assumed for a call whose MaxReplySize is 0: the size of the
	// Reply chunk offered for it [65536].
	MaxReply int
	// IRD is the RDMA Reads the responder may have outstanding against
	// our Read chunks [16]; at least 1. ORD is the RDMA Reads we may issue
	// (a requester issues none) [0].
	IRD, ORD int
	// NoRemoteInvalidate stops us from advertising Remote Invalidation
	// (RFC 8797): the responder then replies with plain Sends.
	NoRemoteInvalidate bool
	// Limits bound the reply headers we decode.
	Limits Limits
	// Metrics, when not nil, collects this connection's counters (shared
	// among connections, e.g. across reconnects); nil gives the Client
	// its own.
	Metrics *ClientMetrics
	Logger  *slog.Logger
}

// ClientMetrics collects requester counters; it may be shared by the
// Clients of one mount across reconnects. The zero value is ready.
type ClientMetrics struct{ m metrics }

// Metrics returns a snapshot of the counters.
func (cm *ClientMetrics) Metrics() Metrics { return cm.m.snapshot() }

func (o *ClientOptions) fill() error {
	if o.Credits <= 0 {
		o.Credits = 32
	}
	if o.Inline == 0 {
		o.Inline = OurInline
	}
	if o.Inline < MinInlineSize || o.Inline > MaxInlineSize || o.Inline%1024 != 0 {
		return fmt.Errorf("%w: inline size %d (RFC 8797: 1024..262144, multiple of 1024)", ErrInvalid, o.Inline)
	}
	if o.MaxReply <= 0 {
		o.MaxReply = 64 << 10
	}
	o.MaxReply = xdr.RoundUp(o.MaxReply)
	if o.IRD <= 0 {
		o.IRD = 16
	}
	if o.Metrics == nil {
		o.Metrics = &ClientMetrics{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Work request IDs: the kind in the top byte, an index below.
const (
	wrRecv uint64 = iota << 56
	wrSend
	wrInv
	wrRead
	wrWrite
	wrKindMask uint64 = 0xff << 56
)

// Client is the requester end of one RPC-over-RDMA v1 connection (RFC 8166
// section 3): a sunrpc.ClientTransport. It is safe for concurrent use.
type Client struct {
	cqd    cqDrain
	opts   ClientOptions
	m      *metrics
	pd     verbs.PD
	cq     verbs.CQ
	qp     verbs.QP
	info   verbs.ConnInfo
	peer   PrivateData
	inline Inline
	lim    Limits
	remInv bool // we advertised Remote Invalidation

	sendMR, recvMR verbs.MR
	slots          []slot
	recvWRs        []verbs.RecvWR // one per receive buffer, prebuilt
	recvSGEs       []verbs.SGE

	mu      sync.Mutex
	free    []int           // free slot indexes
	waiters []*creditWaiter // callers waiting for a credit, FIFO
	inUse   int             // slots held (outstanding or abandoned or reply not released)
	window  int             // min(Credits, last grant)
	byXID   map[uint32]int  // outstanding calls
	dead    bool
	freed   bool // release ran: free slots give back their buffers at once

	done    chan struct{}
	err     error // why the connection died; wraps sunrpc.ErrConnLost
	loopEnd chan struct{}
	cancel  context.CancelFunc
}

type creditWaiter struct {
	ch   chan struct{}
	slot int // granted slot, or -1
}

type slotState uint8

const (
	slotFree slotState = iota
	slotBusy
	slotAbandoned // RoundTrip returned; the reply has not arrived
)

// slot is the state of one credit: a call in flight and its reply.
type slot struct {
	c     *Client
	idx   int
	state slotState
	xid   uint32
	done  chan struct{} // reply arrived (cap 1)
	inv   chan struct{} // local invalidate completed (cap 1)

	hdr      Header // the call's transport header
	readSeg  [1]ReadSegment
	writeSeg [1]Segment
	writes   [1][]Segment
	replySeg [1]Segment

	// Filled by the completion goroutine.
	rep       Header
	recvIdx   int
	recvLen   int
	hdrLen    int
	decodeErr error
	invKey    uint32 // STag the responder invalidated (Send With Invalidate), 0 if none

	payMR, resMR    verbs.MR // caller memory registered for this call
	longMR, replyMR verbs.MR // slot-owned chunk buffers, registered once
	longOn, replyOn bool     // their STag is exposed for the current call

	reply sunrpc.Reply
	wr    verbs.SendWR // the call's Send
	invWR verbs.SendWR
	sge   [1]verbs.SGE
}

// Dial connects to the RPC-over-RDMA responder at addr ("host:port", NFS
// uses 20049) on dev and returns the requester end (RFC 8166 section 3,
// RFC 8797 private data). Its receives are posted before the connection
// request. Errors: the device's (ErrRejected, timeouts), ErrInvalid for
// bad options.
func Dial(ctx context.Context, dev verbs.Device, addr string, opts ClientOptions) (*Client, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	c := &Client{opts: opts, m: &opts.Metrics.m, lim: opts.Limits, remInv: !opts.NoRemoteInvalidate,
		byXID: make(map[uint32]int, opts.Credits), window: 1, done: make(chan struct{}), loopEnd: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			c.release()
		}
	}()
	var err error
	if c.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	n := opts.Credits
	if c.cq, err = dev.CreateCQ(4*n + 16); err != nil {
		return nil, err
	}
	c.cqd = cqDrain{cq: c.cq, complete: c.complete}
	if c.qp, err = c.pd.CreateQP(verbs.QPAttr{SendCQ: c.cq, RecvCQ: c.cq, MaxSendWR: 3*n + 4, MaxRecvWR: n, MaxSGE: 4}); err != nil {
		return nil, err
	}
	if c.sendMR, err = c.reg(make([]byte, n*opts.Inline), 0); err != nil {
		return nil, err
	}
	if c.recvMR, err = c.reg(make([]byte, n*opts.Inline), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	c.slots = make([]slot, n)
	c.free = make([]int, 0, n)
	c.recvWRs, c.recvSGEs = make([]verbs.RecvWR, n), make([]verbs.SGE, n)
	for i := range c.slots {
		c.recvSGEs[i] = c.recvMR.SGE(i*opts.Inline, opts.Inline)
		c.recvWRs[i] = verbs.RecvWR{ID: wrRecv | uint64(i), SGL: c.recvSGEs[i : i+1 : i+1]}
		s := &c.slots[i]
		s.c, s.idx = c, i
		s.done, s.inv = make(chan struct{}, 1), make(chan struct{}, 1)
		c.free = append(c.free, i)
		if err := c.postRecv(i); err != nil {
			return nil, err
		}
	}
	local := PrivateData{RemoteInvalidate: c.remInv, SendSize: opts.Inline, RecvSize: opts.Inline}
	pdata, err := local.Append(nil)
	if err != nil {
		return nil, err
	}
	c.info, err = dev.Connect(ctx, addr, c.qp, verbs.ConnParam{PrivateData: pdata, ResponderResources: opts.IRD, InitiatorDepth: opts.ORD})
	if err != nil {
		return nil, err
	}
	c.peer, _ = parsePrivateData(c.info.PrivateData)
	c.inline = inlineFor(local, c.peer, 1)
	if _, err := planCall(Message{}, Message{}, c.inline); err != nil {
		return nil, err
	}
	c.m.connections.Add(1)
	lctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.loop(lctx)
	ok = true
	return c, nil
}

// Inline returns the connection's inline thresholds (RFC 8166 section
// 3.3.2) and Peer the responder's RFC 8797 private data (absentPrivateData
// when it sent none).
func (c *Client) Inline() Inline       { return c.inline }
func (c *Client) Peer() PrivateData    { return c.peer }
func (c *Client) Info() verbs.ConnInfo { return c.info }

// Credits returns the current credit window: min(Credits, the last grant).
func (c *Client) Credits() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.window
}

// Metrics returns a snapshot of the counters (of opts.Metrics when shared).
func (c *Client) Metrics() Metrics { return c.m.snapshot() }

// Dialer returns a sunrpc.DialFunc that dials addr with opts.
func Dialer(dev verbs.Device, addr string, opts ClientOptions) sunrpc.DialFunc {
	if opts.Metrics == nil {
		opts.Metrics = &ClientMetrics{}
	}
	return func(ctx context.Context) (sunrpc.ClientTransport, error) {
		c, err := Dial(ctx, dev, addr, opts)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

func (c *Client) postRecv(i int) error {
	return c.qp.PostRecv(&c.recvWRs[i])
}

// Done is closed when the connection is dead.
func (c *Client) Done() <-chan struct{} { return c.done }

// Close disconnects; outstanding RoundTrips return an error wrapping
// sunrpc.ErrConnLost.
func (c *Client) Close() error {
	c.fail(sunrpc.ErrClosed)
	<-c.loopEnd
	return nil
}

// fail marks the connection dead (first cause wins) and disconnects.
func (c *Client) fail(cause error) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	c.err = fmt.Errorf("%w: rpcrdma %v: %w", sunrpc.ErrConnLost, c.qp.RemoteAddr(), cause)
	ws := c.waiters
	c.waiters = nil
	c.mu.Unlock()
	c.opts.Logger.Debug("rpcrdma: connection lost", "peer", c.qp.RemoteAddr(), "err", cause)
	for _, w := range ws {
		close(w.ch)
	}
	close(c.done)
	c.qp.Close()
	c.cancel()
}

// release frees everything the connection registered; slots still held
// by a RoundTrip free their buffers when they are put back, and the last
// one put back frees the send and receive buffer pools (a RoundTrip still
// encodes into its send buffer, or returns a reply in its receive buffer,
// after the connection died: a closed region must not be used, since the
// provider may hand it out again).
func (c *Client) release() {
	if c.qp != nil {
		c.qp.Close()
	}
	c.mu.Lock()
	c.freed = true
	for _, i := range c.free {
		c.slots[i].deregOwned()
	}
	if c.inUse == 0 {
		c.deregPoolsLocked()
	}
	c.mu.Unlock()
	if c.cq != nil {
		c.cq.Close()
	}
	if c.pd != nil {
		c.pd.Close()
	}
}

// loop is the connection's completion goroutine: it waits on the CQ
// (no busy polling), matches replies to calls by XID and fails the
// connection on an error completion or when the QP leaves RTS. When the
// CQ takes a handler (verbs.CQHandler), replies are matched by the
// provider's goroutine that received them, which wakes the caller
// directly (cqDrain), and this goroutine handles the rest.
func (c *Client) loop(ctx context.Context) {
	defer close(c.loopEnd)
	defer c.m.connections.Add(-1)
	defer c.release()
	go func() {
		select {
		case <-c.qp.Done():
			c.fail(c.qp.Err())
		case <-ctx.Done():
		}
	}()
	if err := c.cqd.run(ctx, nil); err != nil {
		c.fail(err)
	}
	c.settleAbandoned()
}

// settleAbandoned frees the slots of calls whose RoundTrip returned
// before their reply, once the connection is dead.
func (c *Client) settleAbandoned() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.slots {
		if s := &c.slots[i]; s.state == slotAbandoned {
			s.state = slotFree
			c.putSlotLocked(i)
		}
	}
}

// complete handles one completion; it never stops the drain (a failed
// one fails the connection, whose Wait then ends).
func (c *Client) complete(wc *verbs.WC) bool {
	c.handle(wc)
	return true
}

func (c *Client) handle(wc *verbs.WC) {
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCFlushErr {
			c.opts.Logger.Warn("rpcrdma: work request failed", "status", wc.Status, "opcode", wc.Opcode, "err", wc.Err)
		}
		c.fail(fmt.Errorf("%v %v: %w", wc.Opcode, wc.Status, wc.Err))
		return
	}
	idx := int(wc.ID &^ wrKindMask)
	switch wc.ID & wrKindMask {
	case wrInv:
		if idx < len(c.slots) {
			c.slots[idx].inv <- struct{}{}
		}
		return
	case wrRecv:
	default:
		return
	}
	if idx >= len(c.slots) {
		return
	}
	msg := c.recvMR.Bytes()[idx*c.opts.Inline:][:wc.ByteLen]
	if len(msg) < 4 {
		c.m.badReplies.Add(1)
		c.repost(idx)
		return
	}
	xid := be.Uint32(msg)
	c.mu.Lock()
	si, ok := c.byXID[xid]
	if ok {
		delete(c.byXID, xid)
	} else {
		c.m.unmatched.Add(1)
	}
	c.mu.Unlock()
	if !ok {
		c.repost(idx)
		return
	}
	s := &c.slots[si]
	s.hdrLen, s.decodeErr = s.rep.Decode(msg, &c.lim)
	s.recvIdx, s.recvLen = idx, len(msg)
	s.invKey = 0
	if wc.Flags&verbs.WCWithInv != 0 {
		s.invKey = wc.InvalidatedKey
		c.m.sendInv.Add(1)
	}
	if s.decodeErr == nil {
		c.grant(s.rep.Credits)
	}
	c.mu.Lock()
	if s.state != slotAbandoned {
		s.done <- struct{}{} // cap 1, empty: does not block
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	// Its caller is gone: invalidate what stays exposed and free it.
	s.invalidateAsync()
	c.repost(idx)
	c.mu.Lock()
	s.state = slotFree
	c.putSlotLocked(si)
	c.mu.Unlock()
}

func (c *Client) repost(idx int) {
	if err := c.postRecv(idx); err != nil {
		c.fail(err)
	}
}

// grant applies a responder's rdma_credit: a grant of 0 counts as 1 (as
// Linux xprtrdma, rpcrdma_update_cwnd), capped at Credits.
func (c *Client) grant(g uint32) {
	n := int(min(max(g, 1), uint32(c.opts.Credits)))
	c.m.creditsGranted.Store(uint64(g))
	c.mu.Lock()
	c.window = n
	c.wakeLocked()
	c.mu.Unlock()
}

// wakeLocked hands free slots to waiters while the window allows.
func (c *Client) wakeLocked() {
	for len(c.waiters) > 0 && c.inUse < c.window && len(c.free) > 0 {
		w := c.waiters[0]
		copy(c.waiters, c.waiters[1:])
		c.waiters[len(c.waiters)-1] = nil
		c.waiters = c.waiters[:len(c.waiters)-1]
		w.slot = c.takeLocked()
		close(w.ch)
	}
}

func (c *Client) takeLocked() int {
	i := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	c.inUse++
	c.m.creditsInUse.Add(1)
	c.slots[i].state = slotBusy
	return i
}

func (c *Client) putSlotLocked(i int) {
	if c.freed {
		c.slots[i].deregOwned()
	}
	c.free = append(c.free, i)
	c.inUse--
	c.m.creditsInUse.Add(-1)
	if c.freed && c.inUse == 0 {
		c.deregPoolsLocked()
	}
	c.wakeLocked()
}

// deregPoolsLocked deregisters the send and receive buffer pools, once
// release ran and no slot is held.
func (c *Client) deregPoolsLocked() {
	c.dereg(c.sendMR)
	c.dereg(c.recvMR)
	c.sendMR, c.recvMR = nil, nil
}

// acquire waits for a credit (ctx-aware, FIFO, no spinning).
func (c *Client) acquire(ctx context.Context) (int, error) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return -1, c.err
	}
	if len(c.waiters) == 0 && c.inUse < c.window && len(c.free) > 0 {
		i := c.takeLocked()
		c.mu.Unlock()
		return i, nil
	}
	w := &creditWaiter{ch: make(chan struct{}), slot: -1}
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	select {
	case <-w.ch:
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.slot >= 0 {
		if ctx.Err() == nil {
			return w.slot, nil
		}
		c.slots[w.slot].state = slotFree
		c.putSlotLocked(w.slot)
	} else {
		for i, x := range c.waiters {
			if x == w {
				c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
				break
			}
		}
	}
	if c.dead {
		return -1, c.err
	}
	return -1, fmt.Errorf("rpcrdma: waiting for a credit: %w", ctx.Err())
}

// RoundTrip sends call and waits for its reply (sunrpc.ClientTransport).
// It waits for a credit first (RFC 8166 section 3.3.1), chooses chunks with
// planCall, registers the caller's memory for them, and before returning
// invalidates and deregisters every registration of the call (unless the
// responder invalidated it with Send With Invalidate). Errors:
// sunrpc.ErrConnLost (wrapped) when the connection died, ctx's error, an
// *ErrorReply (ERR_VERS, ERR_CHUNK) for RDMA_ERROR, ErrChunk when the reply
// does not match the chunks offered, ErrInvalid for a call too large.
func (c *Client) RoundTrip(ctx context.Context, call *sunrpc.Call) (*sunrpc.Reply, error) {
	si, err := c.acquire(ctx)
	if err != nil {
		return nil, err
	}
	s := &c.slots[si]
	if err := s.send(call); err != nil {
		s.dropRegs()
		if errors.Is(err, verbs.ErrQPState) {
			// the QP failed before the completion loop noticed: that is
			// connection loss, and the call may be retried on a new one
			c.fail(err)
		}
		c.mu.Lock()
		delete(c.byXID, call.XID)
		s.state = slotFree
		c.putSlotLocked(si)
		dead := c.dead
		c.mu.Unlock()
		if dead {
			return nil, c.err
		}
		return nil, err
	}
	select {
	case <-s.done:
		return s.finish(call)
	case <-ctx.Done():
		return nil, s.abandon(call, fmt.Errorf("rpcrdma: %w", ctx.Err()))
	case <-c.done:
		return nil, s.abandon(call, c.err)
	}
}

// abandon gives up on the call: caller memory is deregistered now (a late
// RDMA access by the responder then fails); the credit stays held until
// the reply arrives or the connection dies.
func (s *slot) abandon(call *sunrpc.Call, err error) error {
	c := s.c
	// Drop the caller's registrations first, while the slot is still
	// slotBusy: only this goroutine frees a busy slot, so the completion
	// loop cannot free it (and a new RoundTrip cannot take it and register
	// its own payMR/resMR) before this is done. Once the slot is marked
	// abandoned below and c.mu released, it may be freed and reused at any
	// moment, so s.payMR/s.resMR must not be touched after that. If the
	// reply raced in, finish's dropCallerRegs finds them nil and skips them.
	s.dropCallerRegs()
	c.mu.Lock()
	select {
	case <-s.done: // the reply raced in
		c.mu.Unlock()
		r, e := s.finish(call)
		if e == nil {
			r.Release()
		}
		return err
	default:
	}
	s.state = slotAbandoned
	if c.dead {
		delete(c.byXID, s.xid)
		s.state = slotFree
		c.putSlotLocked(s.idx)
	}
	c.mu.Unlock()
	return err
}

// send plans, registers, encodes and posts the call.
func (s *slot) send(call *sunrpc.Call) error {
	c := s.c
	m := &call.Msg
	cm := Message{Head: len(m.Head), Tail: len(m.Tail)}
	if m.HasPayload {
		cm.Payload, cm.DDP = len(m.Payload), true
	}
	maxRep := call.MaxReplySize
	if maxRep <= 0 {
		maxRep = c.opts.MaxReply
	}
	rm := Message{Head: xdr.RoundUp(maxRep)}
	if call.ReplyPayload != nil {
		rm.Payload, rm.DDP = len(call.ReplyPayload), true
	}
	p, err := planCall(cm, rm, c.inline)
	if err != nil {
		return err
	}
	h := &s.hdr
	*h = Header{XID: call.XID, Vers: Version, Credits: uint32(c.opts.Credits), Proc: p.Proc,
		Reads: s.readSeg[:0], Writes: s.writes[:0], Reply: s.replySeg[:0]}
	s.invKey = 0
	switch p.Call {
	case CallReadChunk:
		mr, err := c.reg(m.Payload, verbs.AccessRemoteRead)
		if err != nil {
			return err
		}
		s.payMR = mr
		c.m.registrations.Add(1)
		h.Reads = append(h.Reads, ReadSegment{Position: p.ReadPos, Segment: Segment{Handle: mr.RKey(), Length: uint32(p.ReadLen), Offset: mr.Addr()}})
		c.m.readChunks.Add(1)
		c.m.readChunkBytes.Add(uint64(p.ReadLen))
	case CallLong:
		if err := s.ensure(&s.longMR, p.ReadLen, verbs.AccessRemoteRead); err != nil {
			return err
		}
		s.longOn = true
		b := m.AppendTo(s.longMR.Bytes()[:0])
		h.Reads = append(h.Reads, ReadSegment{Position: 0, Segment: Segment{Handle: s.longMR.RKey(), Length: uint32(len(b)), Offset: s.longMR.Addr()}})
		c.m.posZero.Add(1)
		c.m.readChunkBytes.Add(uint64(len(b)))
	}
	switch p.Reply {
	case ReplyWriteChunk:
		mr, err := c.reg(call.ReplyPayload, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			return err
		}
		s.resMR = mr
		c.m.registrations.Add(1)
		s.writeSeg[0] = Segment{Handle: mr.RKey(), Length: uint32(p.WriteLen), Offset: mr.Addr()}
		h.Writes = append(h.Writes, s.writeSeg[:1])
	case ReplyLong:
		if err := s.ensure(&s.replyMR, p.ReplyLen, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
			return err
		}
		s.replyOn = true
		h.Reply = append(h.Reply, Segment{Handle: s.replyMR.RKey(), Length: uint32(p.ReplyLen), Offset: s.replyMR.Addr()})
	}
	buf := c.sendMR.Bytes()[s.idx*c.opts.Inline:][:c.opts.Inline]
	b, err := h.Encode(buf[:0])
	if err != nil {
		return err
	}
	switch p.Call {
	case CallInline:
		b = m.AppendTo(b)
		c.m.inlineMsgs.Add(1)
	case CallReadChunk:
		b = append(append(b, m.Head...), m.Tail...)
		c.m.inlineMsgs.Add(1)
	}
	if len(b) > c.inline.Send || len(b) > len(buf) || &b[0] != &buf[0] {
		return fmt.Errorf("%w: call of %d bytes exceeds the inline threshold %d", ErrInvalid, len(b), c.inline.Send)
	}
	c.m.inlineBytes.Add(uint64(len(b)))
	s.xid = call.XID
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return c.err
	}
	if _, dup := c.byXID[call.XID]; dup {
		// A retransmission on this connection (sunrpc RetryPolicy.Timeout)
		// while the first transmission is outstanding: its reply would
		// echo the first transmission's chunks. As Linux xprtrdma
		// (xprt_rdma_timer), disconnect: the call is retransmitted on a
		// new connection.
		c.mu.Unlock()
		c.fail(errRetransmit)
		return c.err
	}
	c.byXID[call.XID] = s.idx
	c.mu.Unlock()
	c.m.calls.Add(1)
	s.sge[0] = c.sendMR.SGE(s.idx*c.opts.Inline, len(b))
	s.wr = verbs.SendWR{ID: wrSend | uint64(s.idx), Opcode: verbs.WRSend, SGL: s.sge[:]}
	return c.qp.PostSend(&s.wr)
}

// finish checks the reply against the call's chunks and returns it, after
// invalidating and deregistering the call's registrations.
func (s *slot) finish(call *sunrpc.Call) (*sunrpc.Reply, error) {
	c := s.c
	c.m.replies.Add(1)
	err := s.checkReply()
	s.dropCallerRegs()
	s.invalidateSync()
	if err != nil {
		s.releaseRecv()
		return nil, err
	}
	r := &s.reply
	*r = sunrpc.Reply{Placed: -1, Owner: s}
	if len(s.hdr.Writes) > 0 && len(s.rep.Writes) > 0 {
		r.Placed = int(chunkLen(s.rep.Writes[0]))
		c.m.writeChunks.Add(1)
		c.m.writeChunkBytes.Add(uint64(r.Placed))
	}
	if s.rep.Proc == ProcNoMsg {
		n := int(chunkLen(s.rep.Reply))
		r.Body = s.replyMR.Bytes()[:n]
		c.m.replyChunks.Add(1)
		c.m.replyChunkBytes.Add(uint64(n))
	} else {
		r.Body = c.recvMR.Bytes()[s.recvIdx*c.opts.Inline:][s.hdrLen:s.recvLen]
	}
	return r, nil
}

func (s *slot) checkReply() error {
	c := s.c
	if s.decodeErr != nil {
		c.m.badReplies.Add(1)
		return fmt.Errorf("rpcrdma: reply to XID %#x: %w", s.xid, s.decodeErr)
	}
	if s.rep.Proc == ProcError {
		if s.rep.Errcode == ErrcodeVers {
			c.m.errVers.Add(1)
		} else {
			c.m.errChunk.Add(1)
		}
		return &ErrorReply{XID: s.xid, Code: s.rep.Errcode, VersLow: s.rep.VersLow, VersHigh: s.rep.VersHigh}
	}
	if err := s.rep.CheckReply(&s.hdr); err != nil {
		c.m.badReplies.Add(1)
		return fmt.Errorf("rpcrdma: reply to XID %#x: %w", s.xid, err)
	}
	if s.rep.Proc == ProcNoMsg {
		if err := s.rep.CheckXID(s.replyMR.Bytes()[:chunkLen(s.rep.Reply)]); err != nil {
			c.m.badReplies.Add(1)
			return fmt.Errorf("rpcrdma: reply chunk: %w", err)
		}
	}
	return nil
}

// invalidateSync invalidates the slot-owned STags of the call and waits
// for the local invalidates to complete (not those the responder
// invalidated remotely).
func (s *slot) invalidateSync() {
	c := s.c
	for _, x := range []struct {
		on *bool
		mr verbs.MR
	}{{&s.longOn, s.longMR}, {&s.replyOn, s.replyMR}} {
		if !*x.on {
			continue
		}
		*x.on = false
		if x.mr.RKey() == s.invKey {
			continue
		}
		s.invWR = verbs.SendWR{ID: wrInv | uint64(s.idx), Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateKey: x.mr.RKey()}
		if err := c.qp.PostSend(&s.invWR); err != nil {
			continue // the QP is dead: closing it invalidates everything
		}
		select {
		case <-s.inv:
		case <-c.done:
		}
	}
}

func (s *slot) releaseRecv() {
	c := s.c
	c.repost(s.recvIdx)
	c.mu.Lock()
	s.state = slotFree
	c.putSlotLocked(s.idx)
	c.mu.Unlock()
}

// ReleaseReply gives the reply's receive buffer back (reposted) and its
// credit (sunrpc.Releaser).
func (s *slot) ReleaseReply(r *sunrpc.Reply) {
	r.Body = nil
	s.releaseRecv()
}

var errRetransmit = errors.New("rpcrdma: retransmission on the same connection: reconnecting")

var errKeepalive = errors.New("rpcrdma: keepalive NULL call timed out")

// KeepAlive makes a NULL call (procedure 0 of prog/vers, e.g. NFS 100003
// v3) every interval until the connection dies or ctx ends, and fails the
// connection (outstanding RoundTrips get sunrpc.ErrConnLost) when one gets
// no reply within timeout: a peer that disappeared without closing TCP.
// It calls even when the connection is busy (not only when idle).
func (c *Client) KeepAlive(ctx context.Context, prog, vers uint32, interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	xid := rand.Uint32() // its own XID space, apart from the caller's
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.done:
			return
		case <-t.C:
		}
		xid++
		var e xdr.Encoder
		for _, v := range []uint32{xid, 0, 2, prog, vers, 0, 0, 0, 0, 0} {
			e.Uint32(v)
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		r, err := c.RoundTrip(cctx, &sunrpc.Call{XID: xid, Msg: sunrpc.Message{Head: e.Bytes()}, MaxReplySize: 256})
		cancel()
		if err == nil {
			r.Release()
			continue
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			c.fail(errKeepalive)
			return
		}
	}
}
