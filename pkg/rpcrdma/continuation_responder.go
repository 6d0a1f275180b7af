package rpcrdma

import (
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// The responder's side of message continuation (continuation.go): the
// parts of a continued call reassembled in arrival order, and a reply
// sent as RDMA2_REPLY_MIDDLE Sends and a final RDMA2_REPLY_INLINE.

// reassembly is a continued call a responder connection is receiving:
// the parts so far (buf) of the call xid, and what its last
// RDMA2_CALL_MIDDLE said remains.
type reassembly struct {
	active    bool
	xid       uint32
	remaining uint32
	buf       []byte
}

// reassemble looks at the message of n bytes just received into slot
// sl's buffer, in the completion goroutine (so parts are taken in the
// order they arrived). An RDMA2_CALL_MIDDLE that continues the call in
// progress, or starts one, is appended to c.asm and its receive reposted
// at once: reassemble reports true, and no worker sees it. The
// RDMA2_CALL_INLINE that ends the call takes the parts (sl.asm,
// sl.assembled) to its worker. A message that breaks a continuation (a
// part of another call, a remaining count that does not follow, another
// header type) ends it, and its worker answers RDMA2_ERR_INVAL_CONT
// (sl.contErr; the draft's sections 6.3.6 and 7.1.4). A call larger than
// MaxCall breaks it too. Messages that do not decode are left to the
// worker.
func (c *srvConn) reassemble(sl *srvSlot, n int) bool {
	a := &c.asm
	sl.assembled, sl.contErr, sl.xmtErr, sl.parts = false, false, nil, sl.parts[:0]
	msg := c.recv.buf(c.recvMR, sl.idx)[:n]
	if len(msg) < Middle2Len || be.Uint32(msg[4:]) != Version2 {
		if a.active && len(msg) >= PrefixLen {
			a.active, sl.contErr = false, true
		}
		if len(msg) >= PrefixLen {
			c.breakGroup(XmitErr{Bad: XmsID{XID: be.Uint32(msg)}, Code: XmitErrBadHMT, Expect: uint32(HTypeCallSDDP), Current: be.Uint32(msg[12:])})
		}
		return false
	}
	xid, t := be.Uint32(msg), HType(be.Uint32(msg[12:]))
	if !a.active && (t == HTypeCallSDDPMiddle || c.grp.active || c.grp.broken) {
		return c.groupPart(sl, msg, n)
	}
	switch {
	case t == HTypeCallMiddle:
		part := msg[Middle2Len:]
		rem := be.Uint32(msg[PrefixLen:])
		if !c.withinCredit(sl.seq) {
			return false // the worker ends the connection
		}
		total := uint64(rem) + uint64(len(part))
		if a.active && (xid != a.xid || total != uint64(a.remaining)) || !a.active && total > uint64(c.s.opts.MaxCall) {
			a.active, sl.contErr = false, true
			return false
		}
		if !a.active {
			a.active, a.xid, a.buf = true, xid, a.buf[:0]
		}
		a.buf = append(a.buf, part...)
		a.remaining = rem
		c.finish(sl.idx, nil, nil)
		return true
	case a.active:
		a.active = false
		if t == HTypeCallInline && xid == a.xid {
			sl.asm, a.buf = a.buf, sl.asm[:0]
			sl.assembled, sl.asmLast = true, a.remaining
		} else {
			sl.contErr = true
		}
	}
	return false
}

// replyContinued sends the reply m (sizes rm) to the version 2 call in
// sl.hdr as RDMA2_REPLY_MIDDLE Sends and a final RDMA2_REPLY_INLINE,
// when the chunks the call provided cannot carry it (the draft's section
// 6.6.4): its DDP-eligible result, if any, still goes into the first
// Write chunk, which must hold it. It reports false, having sent nothing,
// when continuation cannot be used: the result does not fit the Write
// chunk, the reply needs more than MaxContinuation Sends, or the
// requester's credits do not cover them, now or when they are posted
// (its receives, less one for each
// reply still owed to its other calls); the caller then answers
// RDMA2_ERR_WRITE_RESOURCE or _REPLY_RESOURCE.
func (sl *srvSlot) replyContinued(m *sunrpc.Message, rm Message) bool {
	c, s := sl.c, sl.c.s
	call := &sl.hdr
	write := rm.DDP && len(call.Writes) > 0 && len(call.Writes[0]) > 0
	if write && uint64(rm.Payload) > chunkLen(call.Writes[0]) {
		return false
	}
	p := ReplyPlan{Proc: ProcMsg, Write: write}
	if write {
		p.WriteLen = rm.Payload
	}
	sl.rep.BuildReply(call, p, 1)
	sl.rep.Vers, sl.rep.HType, sl.rep.Reply, sl.rep.HasReply = Version2, HTypeReplyInline, sl.rep.Reply[:0], false
	in := int(c.inline.Load())
	sends, mid := contPlan(rm.Len(), sl.rep.Len(), in)
	if sends < 2 || sends > MaxContinuation || in > s.opts.Inline || !c.peerCovers(sends) {
		s.opts.Logger.Debug("rpcrdma: reply not continued", "sends", sends, "inline", in, "peerLimit", c.cred.peerLimit.Load(), "sent", c.cred.sent, "working", c.cred.working.Load())
		return false
	}
	var payMR verbs.MR
	defer func() { s.dereg(payMR) }()
	if write && rm.Payload > 0 {
		var err error
		if payMR, err = s.reg(c.pd, m.Payload, 0); err != nil {
			c.qp.Close()
			return true
		}
		if !sl.write(call.Writes[0], payMR, 0, rm.Payload) {
			return true
		}
		s.m.writeChunks.Add(1)
		s.m.writeChunkBytes.Add(uint64(rm.Payload))
	}
	sl.stream = appendStream(sl.stream[:0], m, !write)
	wrs, sges, msgs, region, ok := sl.contBuffers(sends)
	if !ok {
		return true
	}
	rest := sl.stream
	for i := range sends {
		buf := region[i*in : i*in : (i+1)*in]
		var b []byte
		var err error
		if i < sends-1 {
			part := rest[:min(mid, (len(rest)-4)&^3)]
			rest = rest[len(part):]
			mh := Header{XID: call.XID, Vers: Version2, Credits: 1, Header2: Header2{HType: HTypeReplyMiddle, Remaining: uint32(len(rest))}}
			if b, err = mh.Encode(buf); err == nil {
				b = append(b, part...)
			}
		} else if b, err = sl.rep.Encode(buf); err == nil {
			b = append(b, rest...)
		}
		if err != nil || len(b) > in {
			c.qp.Close()
			return true
		}
		msgs[i] = b
		sges[i] = sl.contMR.SGE(i*in, len(b))
		wrs[i] = verbs.SendWR{ID: wrSend | uint64(sl.idx), Opcode: verbs.WRSend, SGL: sges[i : i+1 : i+1]}
	}
	// Only the last is signaled and waited for: the Sends complete in
	// order.
	wrs[sends-1].Flags = verbs.SendSignaled
	// Counted before they are posted (the requester may see the reply
	// at once), taken back when they are not.
	count := func(d uint64) {
		s.m.replies.Add(d)
		s.m.continued.Add(d)
		s.m.inlineBytes.Add(d * uint64(len(sl.stream)))
	}
	count(1)
	posted, covered := c.finishMany(sl.idx, msgs, wrs)
	if !covered {
		count(^uint64(0)) // -1
		return false
	}
	if posted {
		_ = c.wait(sl.sendDone)
	}
	return true
}

// peerCovers tells whether the requester's last rdma_credit leaves room
// for n Sends beyond one reply to each call in process.
func (c *srvConn) peerCovers(n int) bool {
	cc := &c.cred
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return c.peerCoversLocked(n)
}

func (c *srvConn) peerCoversLocked(n int) bool {
	cc := &c.cred
	avail := int64(int32(cc.peerLimit.Load() - cc.sent))
	return avail-cc.working.Load() >= int64(n-1)
}

// finishMany is finish for the several Sends of a continued reply: they
// are posted together, under the lock every reply is posted under, so
// that no other message comes between them, each carrying the credit.
// The requester's credit is checked there, with this call still counted
// in process (its reply is among the Sends), so that replies posted since
// the caller's peerCovers are accounted. It reports false, having
// neither posted nor finished anything, when the credit no longer
// covers them (covered false: the caller answers otherwise), or, with
// covered true, when posting failed.
func (c *srvConn) finishMany(idx int, msgs [][]byte, wrs []verbs.SendWR) (posted, covered bool) {
	cc := &c.cred
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if !c.peerCoversLocked(len(wrs)) {
		return false, false
	}
	cc.held--
	cc.working.Add(-1)
	cc.idle = append(cc.idle, idx)
	c.releasePartsLocked(idx)
	if !c.fillLocked() {
		return false, true
	}
	for i := range wrs {
		be.PutUint32(msgs[i][creditOffset:], c.creditLocked())
		cc.sent++
		if c.qp.PostSend(&wrs[i]) != nil {
			return false, true
		}
	}
	return true, true
}

// contBuffers returns the slot's buffers for a reply of sends Sends (at
// most MaxContinuation): their work requests, SGEs and messages, and the
// registered region their bytes are built in (MaxContinuation x Inline,
// registered once per slot). ok is false when the region cannot be
// registered: the connection is closed.
func (sl *srvSlot) contBuffers(sends int) (wrs []verbs.SendWR, sges []verbs.SGE, msgs [][]byte, region []byte, ok bool) {
	c, s := sl.c, sl.c.s
	if sl.contMR == nil || sl.contMR.Len() < sends*s.opts.Inline {
		s.dereg(sl.contMR)
		var err error
		if sl.contMR, err = s.reg(c.pd, make([]byte, MaxContinuation*s.opts.Inline), 0); err != nil {
			c.qp.Close()
			return nil, nil, nil, nil, false
		}
	}
	if cap(sl.contWRs) < sends {
		sl.contWRs, sl.contSGEs, sl.contMsgs = make([]verbs.SendWR, MaxContinuation), make([]verbs.SGE, MaxContinuation), make([][]byte, MaxContinuation)
	}
	return sl.contWRs[:sends], sl.contSGEs[:sends], sl.contMsgs[:sends], sl.contMR.Bytes(), true
}
