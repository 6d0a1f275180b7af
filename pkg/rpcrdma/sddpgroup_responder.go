package rpcrdma

import (
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// The responder's side of transmission groups (sddpgroup.go): the
// receives of a call's group held until its reply, its pieces located,
// and a reply's item sent across Sends.

// groupPart looks at a message of n bytes just received into slot sl's
// buffer (completion goroutine) while a group is being received, when
// it starts one (an RDMA2_CALL_SDDP_MIDDLE), or when it belongs to the
// group that broke last. A middle that follows is held: its receive is
// not reposted and no worker sees it; groupPart reports true. The
// RDMA2_CALL_SDDP of the group's call ends it: the held receives go to
// its worker (sl.parts), which hands the argument up from them and
// releases them with its reply (finish). Anything else breaks the group
// (OPTXERR_BADSEQ for a Send number that does not follow, OPTXERR_BADXID
// for a Send of another call, OPTXERR_BADHMT for another header type;
// optxe_lead the group's first Send): the held receives are released,
// the group's further Sends are dropped (their receives reposted), and
// its final Send is answered RDMA2_XMTERR (sl.xmtErr), once for the
// call; the message that broke it is handled as if no group was open.
func (c *srvConn) groupPart(sl *srvSlot, msg []byte, n int) bool {
	g := &c.grp
	xid, t := be.Uint32(msg), HType(be.Uint32(msg[12:]))
	if g.broken && xid == g.brokenXID && (t == HTypeCallSDDPMiddle || t == HTypeCallSDDP) {
		if t == HTypeCallSDDP {
			g.broken = false
			xe := g.err
			sl.xmtErr = &xe
			return false
		}
		c.finish(sl.idx, nil, nil)
		return true
	}
	if t != HTypeCallSDDPMiddle {
		switch {
		case !g.active:
		case t == HTypeCallSDDP && xid == g.xid && be.Uint32(msg[4:]) == Version2:
			sl.parts = append(sl.parts[:0], g.parts...)
			g.active, g.parts = false, g.parts[:0]
		case t == HTypeCallSDDP:
			c.breakGroup(XmitErr{Bad: XmsID{XID: xid}, Code: XmitErrBadXID, Expect: g.xid, Current: xid})
		default:
			c.breakGroup(XmitErr{Bad: XmsID{XID: xid}, Code: XmitErrBadHMT, Expect: uint32(HTypeCallSDDP), Current: uint32(t)})
		}
		return false
	}
	if _, ok := c.s.opts.sddpLocal(); !ok || len(msg) < Middle2Len {
		return false // the worker answers RDMA2_ERR_INVAL_HTYPE or _BAD_XDR
	}
	if !c.withinCredit(sl.seq) {
		return false // the worker ends the connection
	}
	xn := be.Uint32(msg[PrefixLen:])
	if g.active && xid != g.xid {
		c.breakGroup(XmitErr{Bad: XmsID{XID: xid, Seq: xn}, Code: XmitErrBadXID, Expect: g.xid, Current: xid})
	}
	want := uint32(len(g.parts))
	if !g.active {
		want = 0
	}
	if xn != want || want >= MaxContinuation-1 {
		if !g.active {
			g.active, g.xid, g.parts = true, xid, g.parts[:0]
		}
		c.breakGroup(XmitErr{Bad: XmsID{XID: xid, Seq: xn}, Code: XmitErrBadSeq, Expect: want, Current: xn})
		c.finish(sl.idx, nil, nil)
		return true
	}
	if !g.active {
		g.active, g.xid, g.parts = true, xid, g.parts[:0]
	}
	g.parts = append(g.parts, heldPart{idx: sl.idx, n: n})
	return true
}

// breakGroup ends the group being received: its held receives are
// reposted, and its final Send will be answered xe (optxe_lead the
// group's first Send).
func (c *srvConn) breakGroup(xe XmitErr) {
	g := &c.grp
	if !g.active {
		return
	}
	for _, p := range g.parts {
		c.finish(p.idx, nil, nil)
	}
	xe.HasLead, xe.Lead = true, XmsID{XID: g.xid}
	g.active, g.parts = false, g.parts[:0]
	g.broken, g.brokenXID, g.err = true, g.xid, xe
}

// releasePartsLocked gives back the receives slot idx held for a
// transmission group (cc.mu held), to be reposted with its own.
func (c *srvConn) releasePartsLocked(idx int) {
	cc := &c.cred
	sl := &c.slots[idx]
	for _, p := range sl.parts {
		cc.held--
		cc.working.Add(-1)
		cc.idle = append(cc.idle, p.idx)
	}
	sl.parts = sl.parts[:0]
}

// locateGroup returns the Payload stream of the RDMA2_CALL_SDDP msg
// (header of hl bytes in sl.hdr) that ends a transmission group, and
// its placed argument as the pieces where it landed, in the held
// receives (sl.parts) and msg: nothing is copied. Errors: *XmitErr
// (ddpWindow.locateGroup), ErrChunk (Read chunks beside it), the XID
// check's.
func (sl *srvSlot) locateGroup(msg []byte, hl int) (raw []byte, vec [][]byte, err error) {
	c, s := sl.c, sl.c.s
	h := &sl.hdr
	if len(h.Reads) != 0 {
		return nil, nil, headerErr(ErrChunk, PrefixLen, "RDMA2_CALL_SDDP with Read chunks")
	}
	rb, _ := ourRBStruct(s.opts.Inline)
	w, _ := rb.window()
	sl.sends = sl.sends[:0]
	for _, p := range sl.parts {
		sl.sends = append(sl.sends, c.recv.buf(c.recvMR, p.idx)[:p.n])
	}
	raw, vec, xe := w.locateGroup(sl.sends, msg, hl, &h.SDDP, XmsID{XID: h.XID}, sl.vec[:0])
	if xe != nil {
		return nil, nil, xe
	}
	sl.vec = vec
	if err := h.CheckXID(raw); err != nil {
		return nil, nil, err
	}
	s.m.sddpMsgs.Add(1)
	s.m.sddpBytes.Add(uint64(h.SDDP.Length))
	s.m.sddpGroups.Add(1)
	if len(vec) == 0 {
		vec = append(vec, []byte{})
	}
	return raw, vec, nil
}

// replySDDPGroup sends the reply m (sizes rm) to the call in sl.hdr as a
// transmission group into the requester's DDP-targetable windows. It
// reports false, having sent nothing, when the result does not fit a
// group (fewer than 2 or more than MaxContinuation Sends, the header and
// stream reaching the window) or the requester's credits do not cover
// the Sends now; the caller then goes on as without it.
func (sl *srvSlot) replySDDPGroup(m *sunrpc.Message, rm Message) bool {
	c, s := sl.c, sl.c.s
	call := &sl.hdr
	if !c.sddpOn || !rm.DDP || len(m.Payload) == 0 || len(call.Writes) > 0 && len(call.Writes[0]) > 0 {
		return false
	}
	in := int(c.inline.Load())
	w := c.sddpWin
	r := &sl.rep
	r.BuildReply(call, ReplyPlan{Proc: ProcMsg}, 1)
	r.Vers, r.HType, r.Reply, r.HasReply = Version2, HTypeReplySDDP, r.Reply[:0], false
	r.SDDP = SDDP{}
	hl := r.len2() - r.SDDP.len()
	sd, sends, last, ok := w.planGroup(hl, len(m.Head)+len(m.Tail), len(m.Payload), min(c.sddpLimit, in, s.opts.Inline), sl.tbsn[:0])
	if !ok || !c.peerCovers(sends) {
		r.HType, r.SDDP = HTypeReplyInline, SDDP{}
		return false
	}
	sl.tbsn = sd.TBSN
	sd.Disp = uint32(len(m.Head))
	r.SDDP = sd
	if f := s.mangleReplySDDP.Load(); f != nil {
		(*f)(&r.SDDP)
	}
	wrs, sges, msgs, region, ok := sl.contBuffers(sends)
	if !ok {
		return true
	}
	item := m.Payload
	for i := range sends {
		buf := region[i*in : (i+1)*in : (i+1)*in]
		var b []byte
		var err error
		if i < sends-1 {
			xn := uint32(i)
			if f := s.replyXNum.Load(); f != nil {
				xn = (*f)(i)
			}
			mh := Header{XID: call.XID, Vers: Version2, Credits: 1, Header2: Header2{HType: HTypeReplySDDPMiddle, XNum: xn}}
			b, err = w.middle(buf, &mh, item[i*w.Size:])
		} else if b, err = r.Encode(buf[:0]); err == nil {
			b = w.layout(buf, len(b), [][]byte{m.Head, m.Tail}, item[i*w.Size:], last)
		}
		if err != nil {
			c.qp.Close()
			return true
		}
		msgs[i] = b
		sges[i] = sl.contMR.SGE(i*in, len(b))
		wrs[i] = verbs.SendWR{ID: wrSend | uint64(sl.idx), Opcode: verbs.WRSend, SGL: sges[i : i+1 : i+1]}
	}
	wrs[sends-1].Flags = verbs.SendSignaled
	// Counted before they are posted (the requester may see the reply
	// at once), taken back when they are not.
	count := func(d uint64) {
		s.m.replies.Add(d)
		s.m.sddpMsgs.Add(d)
		s.m.sddpBytes.Add(d * uint64(len(item)))
		s.m.sddpGroups.Add(d)
		s.m.inlineMsgs.Add(d)
		s.m.inlineBytes.Add(d * uint64((sends-1)*(w.Start+w.Size)+last))
	}
	count(1)
	posted, covered := c.finishMany(sl.idx, msgs, wrs)
	if !covered {
		// Other replies took the requester's receives since peerCovers.
		count(^uint64(0)) // -1
		r.HType, r.SDDP = HTypeReplyInline, SDDP{}
		return false
	}
	if posted {
		_ = c.wait(sl.sendDone)
	}
	return true
}

// group is a transmission group being received by a responder
// connection (completion goroutine): the call xid and the receives held
// so far, in Send order; and the last group that broke (brokenXID), whose
// further Sends are dropped and whose final Send is answered with err.
type group struct {
	active    bool
	xid       uint32
	parts     []heldPart
	broken    bool
	brokenXID uint32
	err       XmitErr
}

// heldPart is a receive buffer (idx) holding n bytes of a group's Send.
type heldPart struct{ idx, n int }
