package rpcrdma

import (
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// The responder's side of responder-provided Read chunks (the rprc
// draft): a reply that fits neither inline nor the call's Reply chunk is
// copied into a region of the connection registered for remote read only,
// under a fresh STag, and announced in an RDMA2_REPLY_READ; the region is
// invalidated when the requester's RDMA2_DONE for it arrives, or after
// ServerOptions.ReadChunkTimeout.

// DefaultReadChunkTimeout is how long a responder-provided Read chunk
// stays readable without an RDMA2_DONE (ServerOptions.ReadChunkTimeout).
const DefaultReadChunkTimeout = 10 * time.Second

// keepExposed is the largest exposure region kept for reuse once its
// reply is released (a reply of up to 1 MiB, its header and some room);
// larger ones are deregistered. Exposures are taken first-fit, so a
// connection keeps as many large regions as it had large replies exposed
// at once.
const keepExposed = 1<<20 + 64<<10

// Exposure states.
const (
	expFree       uint8 = iota
	expExposed          // readable by the requester, waiting for RDMA2_DONE
	expFencing          // invalidated (local invalidate posted) after RDMA2_DONE
	expExpiring         // invalidated (local invalidate posted) after the timeout
	expQuarantine       // invalidated after the timeout; kept registered a while
)

// exposure is one responder-provided Read chunk of a connection.
type exposure struct {
	state uint8
	gen   uint32 // bumped at each exposure, so that a stale timer does nothing
	xid   uint32
	mr    verbs.MR
	timer *time.Timer
	invWR verbs.SendWR
}

// exposures are a connection's responder-provided Read chunks: at most
// 2 x ServerOptions.Credits at a time.
type exposures struct {
	mu     sync.Mutex
	on     bool // the requester announced RPRCPull and we announced RPRCExpose
	remInv bool // both announced Remote Invalidation: rdma_inv_handle is set
	closed bool
	e      []exposure
	// remoteInvalidated counts the exposures released by the Send With
	// Invalidate of their RDMA2_DONE.
	remoteInvalidated int
}

// rprcLocal is the PropRPRC value a responder announces.
func (o *ServerOptions) rprcLocal() uint32 {
	if o.NoResponderReadChunks {
		return 0
	}
	f := RPRCExpose
	if !o.NoRemoteInvalidate {
		f |= RPRCRemoteInv
	}
	return f
}

// setupRPRC applies the requester's PropRPRC value peer (the connection's
// RDMA2_CONNPROP_FINAL).
func (c *srvConn) setupRPRC(peer uint32) {
	x := &c.exp
	local := c.s.opts.rprcLocal()
	x.mu.Lock()
	defer x.mu.Unlock()
	x.on = local&RPRCExpose != 0 && peer&RPRCPull != 0
	x.remInv = x.on && local&RPRCRemoteInv != 0 && c.peer.RemoteInvalidate
	if x.on && x.e == nil {
		x.e = make([]exposure, 2*c.s.opts.Credits)
	}
}

// rprcOn tells whether responder-provided Read chunks are used on c.
func (c *srvConn) rprcOn() bool {
	c.exp.mu.Lock()
	defer c.exp.mu.Unlock()
	return c.exp.on || c.s.forceRPRC
}

// expose takes a free exposure for the reply xid of n bytes: its region,
// at least n bytes, valid under a fresh STag, and its index; ok is false
// when none is free or registration failed.
func (c *srvConn) expose(xid uint32, n int) (mr verbs.MR, idx int, ok bool) {
	x := &c.exp
	s := c.s
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil, 0, false
	}
	if x.e == nil { // forceRPRC without negotiation (tests)
		x.e = make([]exposure, 2*s.opts.Credits)
	}
	for i := range x.e {
		e := &x.e[i]
		if e.state != expFree {
			continue
		}
		if e.mr == nil || e.mr.Len() < n {
			s.dereg(e.mr)
			e.mr = nil
			m, err := s.reg(c.pd, make([]byte, max(n, 64<<10)), verbs.AccessRemoteRead)
			if err != nil {
				return nil, 0, false
			}
			e.mr = m
		} else {
			e.mr.Rekey()
		}
		e.state, e.xid = expExposed, xid
		e.gen++
		gen := e.gen
		e.timer = time.AfterFunc(s.opts.ReadChunkTimeout, func() { c.expire(i, gen) })
		return e.mr, i, true
	}
	return nil, 0, false
}

// fence invalidates exposure i's STag with a signaled local invalidate
// (its completion, fenced, ends the fence); x.mu is held.
func (c *srvConn) fenceLocked(i int, state uint8) {
	e := &c.exp.e[i]
	e.state = state
	e.invWR = verbs.SendWR{ID: wrInv | uint64(i), Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateKey: e.mr.RKey()}
	if c.qp.PostSend(&e.invWR) != nil {
		c.qp.Close() // released with the connection
	}
}

// expire invalidates exposure i, exposed as generation gen, whose
// requester sent no RDMA2_DONE within ServerOptions.ReadChunkTimeout (the
// rprc draft's section 4.1.3): a later RDMA Read of it is a remote access
// error.
func (c *srvConn) expire(i int, gen uint32) {
	x := &c.exp
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed || x.e[i].gen != gen || x.e[i].state != expExposed {
		return
	}
	c.s.m.readChunkTimeouts.Add(1)
	c.s.opts.Logger.Debug("rpcrdma: responder-provided Read chunk expired", "peer", c.addr, "xid", x.e[i].xid)
	c.fenceLocked(i, expExpiring)
}

// fenced completes the local invalidate of exposure i (completion
// goroutine): after an RDMA2_DONE the region is free again; after the
// timeout it stays registered, invalid, for another ReadChunkTimeout, so
// that an RDMA2_DONE racing the timeout by Send With Invalidate still
// names a registered STag (invalidating it again is no error), then it is
// free.
func (c *srvConn) fenced(i int) {
	x := &c.exp
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed || i >= len(x.e) {
		return
	}
	e := &x.e[i]
	switch e.state {
	case expFencing:
		c.freeLocked(i)
	case expExpiring:
		e.state = expQuarantine
		gen := e.gen
		e.timer = time.AfterFunc(c.s.opts.ReadChunkTimeout, func() {
			x.mu.Lock()
			defer x.mu.Unlock()
			if !x.closed && x.e[i].gen == gen && x.e[i].state == expQuarantine {
				c.freeLocked(i)
			}
		})
	}
}

func (c *srvConn) freeLocked(i int) {
	e := &c.exp.e[i]
	e.state = expFree
	if e.mr != nil && e.mr.Len() > keepExposed {
		c.s.dereg(e.mr)
		e.mr = nil
	}
}

// pullDone handles an RDMA2_DONE for reply xid's Read chunk whose first
// segment is handle; invKey is the STag the Send With Invalidate carrying
// it invalidated (0: a plain Send). The exposure is fenced and reports
// true; a notification that names no exposed Read chunk (an unknown XID,
// one already expired) reports false and is dropped (the rprc draft's
// section 4.1.3).
func (c *srvConn) pullDone(xid, handle, invKey uint32) bool {
	x := &c.exp
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := range x.e {
		e := &x.e[i]
		if e.state != expExposed || e.xid != xid || e.mr.RKey() != handle {
			continue
		}
		e.timer.Stop()
		if invKey == handle {
			x.remoteInvalidated++
			c.freeLocked(i) // invalidated by the Send With Invalidate
		} else {
			c.fenceLocked(i, expFencing)
		}
		return true
	}
	return false
}

// exposedCount is the exposures not free (tests and metrics).
func (c *srvConn) exposedCount() int {
	x := &c.exp
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for i := range x.e {
		if x.e[i].state != expFree {
			n++
		}
	}
	return n
}

// releaseExposures stops the timers and deregisters the regions (the
// connection is over).
func (c *srvConn) releaseExposures() {
	x := &c.exp
	x.mu.Lock()
	defer x.mu.Unlock()
	x.closed = true
	for i := range x.e {
		if t := x.e[i].timer; t != nil {
			t.Stop()
		}
		c.s.dereg(x.e[i].mr)
		x.e[i].mr = nil
	}
}

// handleDone processes an RDMA2_DONE received in slot sl (decoded in
// sl.hdr): the exposure it names is invalidated, and it is answered with
// an RDMA2_GRANT (rdma_xid 0) carrying the credit its receive gave back:
// the version 2 form of the rprc draft's RDMA_ACK (section 5.2.3), so that
// a requester whose last credit went into the notification learns it may
// send again. A notification naming nothing exposed is answered the same
// way, without any invalidation or RDMA2_ERROR.
func (sl *srvSlot) handleDone(invKey uint32) {
	c, s := sl.c, sl.c.s
	if c.pullDone(sl.hdr.XID, sl.hdr.Handle, invKey) {
		s.m.dones.Add(1)
	} else {
		s.m.donesDropped.Add(1)
		s.opts.Logger.Debug("rpcrdma: RDMA2_DONE for no Read chunk dropped", "peer", c.addr, "xid", sl.hdr.XID)
	}
	in := s.opts.Inline
	b := c.sendMR.Bytes()[sl.idx*in:][:PrefixLen]
	be.PutUint32(b, 0)
	be.PutUint32(b[4:], Version2)
	be.PutUint32(b[12:], uint32(HTypeGrant))
	s.m.grants.Add(1)
	sl.sendCtl(b)
}

// replyRead sends the reply m (sizes rm) to the version 2 call in sl.hdr
// in a responder-provided Read chunk (the rprc draft's section 4.1.1),
// when the chunks the call provided cannot carry it: a DDP-eligible
// result still goes into the first Write chunk, which must hold it; the
// rest of the Payload stream is exposed in an RDMA2_REPLY_READ. It
// reports false, having sent nothing, when the Write chunk is too short or
// no exposure is free.
func (sl *srvSlot) replyRead(m *sunrpc.Message, rm Message) bool {
	c, s := sl.c, sl.c.s
	call := &sl.hdr
	write := rm.DDP && len(call.Writes) > 0 && len(call.Writes[0]) > 0
	if write && uint64(rm.Payload) > chunkLen(call.Writes[0]) {
		return false
	}
	n := rm.Len()
	if write {
		n = rm.Head + rm.Tail
	}
	mr, _, ok := c.expose(call.XID, n)
	if !ok {
		return false
	}
	if b := appendStream(mr.Bytes()[:0], m, !write); len(b) != n {
		c.qp.Close()
		return true
	}
	var payMR verbs.MR
	defer func() { s.dereg(payMR) }()
	p := ReplyPlan{Proc: ProcMsg, Write: write}
	if write && rm.Payload > 0 {
		var err error
		if payMR, err = s.reg(c.pd, m.Payload, 0); err != nil {
			c.qp.Close()
			return true
		}
		if !sl.write(call.Writes[0], payMR, 0, rm.Payload) {
			return true
		}
		p.WriteLen = rm.Payload
		s.m.writeChunks.Add(1)
		s.m.writeChunkBytes.Add(uint64(rm.Payload))
	}
	r := &sl.rep
	r.BuildReply(call, p, 1) // rdma_credit set by finish
	r.Vers, r.HType, r.Reply, r.HasReply = Version2, HTypeReplyRead, r.Reply[:0], false
	r.Reads = append(r.Reads[:0], ReadSegment{Segment: Segment{Handle: mr.RKey(), Length: uint32(n), Offset: mr.Addr()}})
	c.exp.mu.Lock()
	if c.exp.remInv {
		r.InvHandle = mr.RKey()
	}
	c.exp.mu.Unlock()
	in := s.opts.Inline
	b, err := r.Encode(c.sendMR.Bytes()[sl.idx*in:][:0:in])
	if err != nil || len(b) > int(c.inline.Load()) {
		s.opts.Logger.Warn("rpcrdma: RDMA2_REPLY_READ header", "peer", c.addr, "err", err)
		c.qp.Close()
		return true
	}
	wr := &sl.wr
	*wr = verbs.SendWR{ID: wrSend | uint64(sl.idx), Opcode: verbs.WRSend, Flags: verbs.SendSignaled}
	if key, ok := sl.invalidateKey(); ok {
		wr.Opcode, wr.InvalidateKey = verbs.WRSendWithInv, key
		s.m.sendInv.Add(1)
	}
	sl.sge[0] = c.sendMR.SGE(sl.idx*in, len(b))
	wr.SGL = sl.sge[:1]
	s.m.replies.Add(1)
	s.m.replyReads.Add(1)
	s.m.replyReadBytes.Add(uint64(n))
	s.m.inlineBytes.Add(uint64(len(b)))
	if c.finish(sl.idx, b, wr) {
		_ = c.wait(sl.sendDone)
	}
	return true
}
