package rpcrdma

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Send-based DDP across several Sends (the rtrext draft's sections 4.2,
// 7.3 and 9.4, on version 2's message continuation): a DDP-eligible
// argument larger than the responder's DDP-targetable window goes as a
// transmission group, RDMA2_CALL_SDDP_MIDDLE Sends then the final
// RDMA2_CALL_SDDP, each Send's window holding the next part of the item;
// the segments are numbered across the group (TBSN), so that segment t
// is segment t mod Segs of the group's Send t / Segs. The responder holds
// the receives of the group until the reply and hands the argument up as
// the pieces where it landed (sunrpc.Request.ArgPayloadVec).

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

// planGroup sizes the transmission group of an item of il bytes (larger
// than the window) behind a final header of hl bytes (without its
// rpcrdma2_sddp) and a Payload stream of sl bytes, in Sends of at most
// limit bytes: the rpcrdma2_sddp (Disp still to be set), the number of
// Sends, and the final Send's length. ok is false when it does not fit:
// fewer than 2 or more than MaxContinuation Sends, more than MaxTBSN
// segments, the final header and stream reaching the window, or a full
// window past limit.
func (w ddpWindow) planGroup(hl, sl, il, limit int, tbsn []uint32) (s SDDP, sends, last int, ok bool) {
	if il <= 0 || w.SegLen <= 0 || w.Size <= 0 {
		return SDDP{}, 0, 0, false
	}
	padded := xdr.RoundUp(il)
	segs := (padded + w.SegLen - 1) / w.SegLen
	sends = (padded + w.Size - 1) / w.Size
	if sends < 2 || sends > MaxContinuation || segs > MaxTBSN || w.Start < Middle2Len || w.Start+w.Size > limit {
		return SDDP{}, 0, 0, false
	}
	s = SDDP{PSLen: uint32(sl), Items: 1, Length: uint32(il), TBSN: tbsn[:0]}
	for i := range segs {
		s.TBSN = append(s.TBSN, uint32(i))
	}
	if hl+s.len()+sl > w.Start {
		return SDDP{}, 0, 0, false
	}
	return s, sends, w.Start + padded - (sends-1)*w.Size, true
}

// planSDDPGroup tells how many Sends the call m of slot s takes as a
// transmission group (0: it does not fit one), under a final header of
// at most hdrMax bytes.
func (s *slot) planSDDPGroup(m *sunrpc.Message, hdrMax int) int {
	c := s.c
	if !m.HasPayload || len(m.Payload) <= c.sddpWin.Size {
		return 0
	}
	_, sends, _, ok := c.sddpWin.planGroup(hdrMax, len(m.Head)+len(m.Tail), len(m.Payload), min(c.sddpLimit, c.inline.Send), s.tbsn[:0])
	if !ok {
		return 0
	}
	return sends
}

// callSDDPGroup is how a call goes by send-based DDP across Sends.
const callSDDPGroup CallKind = 101

// sendSDDPGroup sends the call m of slot s, whose final header h (with
// the reply's chunks) is built, as a transmission group of sends Sends
// (planSDDPGroup), laid out in the slot's continuation region (one copy
// of the argument, into registered memory) and posted together under
// sendMu, so that no other message comes between them. The responder's
// credits for the sends-1 extra Sends were reserved.
func (s *slot) sendSDDPGroup(m *sunrpc.Message, h *Header, sends int) error {
	c := s.c
	w := c.sddpWin
	in := c.inline.Send
	h.HType, h.SDDP = HTypeCallSDDP, SDDP{}
	hl := h.len2() - h.SDDP.len()
	sd, n, last, ok := w.planGroup(hl, len(m.Head)+len(m.Tail), len(m.Payload), min(c.sddpLimit, in), s.tbsn[:0])
	if !ok || n != sends {
		return fmt.Errorf("%w: call of %d bytes does not fit the responder's receive buffer structure in %d Sends", ErrInvalid, m.Len(), sends)
	}
	s.tbsn = sd.TBSN
	sd.Disp = uint32(len(m.Head))
	h.SDDP = sd
	if c.mangleSDDP != nil {
		c.mangleSDDP(&h.SDDP)
	}
	if err := s.ensure(&s.contMR, sends*in, 0); err != nil {
		return err
	}
	if cap(s.contWRs) < sends {
		s.contWRs, s.contSGEs = make([]verbs.SendWR, sends), make([]verbs.SGE, sends)
	}
	s.contWRs, s.contSGEs = s.contWRs[:sends], s.contSGEs[:sends]
	region := s.contMR.Bytes()
	item := m.Payload
	for i := range sends {
		buf := region[i*in : (i+1)*in : (i+1)*in]
		var b []byte
		var err error
		if i < sends-1 {
			xn := uint32(i)
			if c.mangleXNum != nil {
				xn = c.mangleXNum(i)
			}
			mh := Header{XID: h.XID, Vers: Version2, Credits: c.advertised(), Header2: Header2{HType: HTypeCallSDDPMiddle, XNum: xn}}
			b, err = w.middle(buf, &mh, item[i*w.Size:])
		} else {
			h.Credits = c.advertised()
			if b, err = h.Encode(buf[:0]); err == nil {
				b = w.layout(buf, len(b), [][]byte{m.Head, m.Tail}, item[i*w.Size:], last)
			}
		}
		if err != nil {
			return err
		}
		s.contSGEs[i] = s.contMR.SGE(i*in, len(b))
		s.contWRs[i] = verbs.SendWR{ID: wrSend | uint64(s.idx), Opcode: verbs.WRSend, SGL: s.contSGEs[i : i+1 : i+1]}
	}
	if c.dropPart > 0 && c.dropPart < sends {
		// tests: a Send of the group left out
		s.contWRs = append(s.contWRs[:c.dropPart-1], s.contWRs[c.dropPart:]...)
	}
	c.m.sddpMsgs.Add(1)
	c.m.sddpBytes.Add(uint64(len(item)))
	c.m.sddpGroups.Add(1)
	c.m.inlineMsgs.Add(1)
	c.m.inlineBytes.Add(uint64((sends-1)*(w.Start+w.Size) + last))
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	s.posted = true
	for i := range s.contWRs {
		if err := c.qp.PostSend(&s.contWRs[i]); err != nil {
			return err
		}
	}
	return nil
}

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
	recv := c.recvMR.Bytes()
	sl.sends = sl.sends[:0]
	for _, p := range sl.parts {
		sl.sends = append(sl.sends, recv[p.idx*s.opts.Inline:][:p.n])
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

// locateGroup is locate for a transmission group: mids are the bytes
// the Sends before the final one brought (in order), msg the final one,
// whose header of hl bytes carries s; id names the message (xmsi_seq is
// set to the Send where a check fails). Each Send's window continues
// the previous one's: segment t is in Send t / Segs. It returns the
// Payload stream (in msg) and the item as the pieces where it landed,
// appended to vec; no byte is copied. Transmit Errors are those of
// locate, with OPTXERR_BADTBSN for a segment past the group's last (Max
// the last), OPTXERR_BADOFF for an item running past the bytes a Send
// brought (xmsi_seq that Send), and OPTXERR_BADCONT for a group whose
// final Send places no item.
func (w ddpWindow) locateGroup(mids [][]byte, msg []byte, hl int, s *SDDP, id XmsID, vec [][]byte) (raw []byte, _ [][]byte, xe *XmitErr) {
	sends := len(mids) + 1
	last := uint32(sends - 1)
	bad := func(seq uint32, code XmitErrCode, v, lo, hi int) ([]byte, [][]byte, *XmitErr) {
		id.Seq = seq
		return nil, nil, &XmitErr{Bad: id, Code: code, Value: uint32(v), Min: uint32(lo), Max: uint32(max(hi, 0))}
	}
	if hl < 0 || hl > len(msg) || uint64(s.PSLen) > uint64(len(msg)-hl) {
		return bad(last, XmitErrBadPL, int(s.PSLen), 0, len(msg)-hl)
	}
	end := hl + int(s.PSLen)
	raw = msg[hl:end:end]
	if s.Items == 0 || len(s.TBSN) == 0 {
		id.Seq = last
		return nil, nil, &XmitErr{Bad: id, Code: XmitErrBadCont}
	}
	if s.Disp%4 != 0 || s.Disp > s.PSLen {
		return bad(last, XmitErrBadPL, int(s.Disp), 0, int(s.PSLen))
	}
	segs := sends * w.Segs
	for i, t := range s.TBSN {
		if uint64(t) >= uint64(segs) {
			return bad(last, XmitErrBadTBSN, int(t), 0, segs-1)
		}
		if i > 0 && t != s.TBSN[0]+uint32(i) {
			want := int(s.TBSN[0]) + i
			return bad(last, XmitErrBadTBSN, int(t), want, want)
		}
	}
	if s.Offset%4 != 0 || uint64(s.Offset) >= uint64(w.SegLen) {
		return bad(last, XmitErrBadOff, int(s.Offset), 0, w.SegLen-1)
	}
	room := uint64(len(s.TBSN)) * uint64(w.SegLen)
	if uint64(s.Offset)+uint64(s.Length) > room {
		return bad(last, XmitErrBadOff, int(min(uint64(s.Offset)+uint64(s.Length), 1<<32-1)), 0, int(room))
	}
	g0 := int(s.TBSN[0])*w.SegLen + int(s.Offset)
	g1 := g0 + int(s.Length)
	for k := range sends {
		lo, hi := max(g0, k*w.Size), min(g1, (k+1)*w.Size)
		if lo >= hi {
			continue
		}
		buf := msg
		if k < sends-1 {
			buf = mids[k]
		}
		start, stop := w.Start+lo-k*w.Size, w.Start+hi-k*w.Size
		if stop > len(buf) {
			return bad(uint32(k), XmitErrBadOff, stop, 0, len(buf))
		}
		if k == sends-1 && start < end || k < sends-1 && start < Middle2Len {
			return bad(uint32(k), XmitErrBadOff, start, end, len(buf))
		}
		vec = append(vec, buf[start:stop:stop])
	}
	return raw, vec, nil
}

// Replies: a DDP-eligible result larger than the requester's window,
// for a call that offered no Write chunk (the requester reserved
// receives for the group, replyGroupPlan), goes as RDMA2_REPLY_SDDP_MIDDLE
// Sends and a final RDMA2_REPLY_SDDP; the requester holds the group's
// receives until the reply is released.

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

// replyGroupPlan tells whether the call of slot s, whose reply plan p
// offers a Write chunk for a DDP-eligible result of n bytes, may offer
// none and have the result sent by send-based DDP across our receives:
// SendDDPGroups is on, the responder sends by send-based DDP, we
// announced our structure, the
// result takes 2 to MaxContinuation of our windows, a reply the
// responder cannot send so has a fallback (responder-provided Read
// chunks are in use), and the receives the group's other Sends need are
// free among the MaxContinuation kept beyond the credits. It reserves
// them (s.grpExtra, given back by dropGroupRecv).
func (s *slot) replyGroupPlan(p *CallPlan, n int) bool {
	c := s.c
	if p.Reply != ReplyWriteChunk || !c.sddp || !c.opts.SendDDPGroups || !c.rprc || !c.sddpLocal() || c.opts.NoContinuation {
		return false
	}
	rb, _ := ourRBStruct(c.opts.Inline)
	w, _ := rb.window()
	padded := xdr.RoundUp(n)
	sends := (padded + w.Size - 1) / w.Size
	if sends < 2 || sends > MaxContinuation || (padded+w.SegLen-1)/w.SegLen > MaxTBSN {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.grpReserved+sends-1 > MaxContinuation {
		return false
	}
	c.grpReserved += sends - 1
	s.grpExtra = sends - 1
	p.Reply, p.WriteLen = ReplyInline, 0
	return true
}

// replySDDPMiddle takes an RDMA2_REPLY_SDDP_MIDDLE received in receive
// idx (completion goroutine, so in arrival order): the next Send of its
// call's group is held there (not reposted; the responder sent it
// within our credits, whether or not the call reserved receives for
// it); one that does not follow, or past MaxContinuation Sends, marks
// the reply bad (a Transmit Error when it completes) and is reposted, as
// is one for no call. It reports whether msg was such a message, and whether its
// receive must be reposted.
func (c *Client) replySDDPMiddle(idx int, msg []byte) (is, repost bool) {
	if len(msg) < Middle2Len || HType(be.Uint32(msg[12:])) != HTypeReplySDDPMiddle || be.Uint32(msg[4:]) != Version2 {
		return false, false
	}
	xid, xn := be.Uint32(msg), be.Uint32(msg[PrefixLen:])
	c.mu.Lock()
	si, ok := c.byXID[xid]
	c.mu.Unlock()
	if !ok {
		c.m.unmatched.Add(1)
		return true, true
	}
	s := &c.slots[si]
	want := uint32(len(s.grpRecv))
	if s.grpBad == nil && (xn != want || want >= MaxContinuation-1) {
		s.grpBad = &XmitErr{Bad: XmsID{XID: xid, Dir: 1, Seq: xn}, HasLead: true, Lead: XmsID{XID: xid, Dir: 1}, Code: XmitErrBadSeq, Expect: want, Current: xn}
	}
	if s.grpBad != nil {
		return true, true
	}
	s.grpRecv = append(s.grpRecv, heldPart{idx: idx, n: len(msg)})
	return true, false
}

// dropGroupRecv reposts the receives slot s held for a group reply and
// gives back the receives it reserved.
func (s *slot) dropGroupRecv() {
	c := s.c
	for _, p := range s.grpRecv {
		c.repost(p.idx)
	}
	s.grpRecv, s.grpBad = s.grpRecv[:0], nil
	if s.grpExtra > 0 {
		c.mu.Lock()
		c.grpReserved -= s.grpExtra
		c.mu.Unlock()
		s.grpExtra = 0
	}
}

// takeSDDPGroup is takeSDDP for a reply that ended a transmission group:
// the result, in pieces in the held receives and msg, is handed on as
// them (call.KeepPlaced), or copied once into call.ReplyPayload (Placed)
// or into the rebuilt body.
func (s *slot) takeSDDPGroup(call *sunrpc.Call, r *sunrpc.Reply, msg []byte, w ddpWindow) error {
	c := s.c
	if s.grpBad != nil {
		c.m.badReplies.Add(1)
		return fmt.Errorf("rpcrdma: reply to XID %#x: %w", s.xid, s.grpBad)
	}
	recv := c.recvMR.Bytes()
	s.grpBufs = s.grpBufs[:0]
	for _, p := range s.grpRecv {
		s.grpBufs = append(s.grpBufs, recv[p.idx*c.opts.Inline:][:p.n])
	}
	stream, vec, xe := w.locateGroup(s.grpBufs, msg, s.hdrLen, &s.rep.SDDP, XmsID{XID: s.xid, Dir: 1}, s.grpVec[:0])
	if xe != nil {
		c.m.badReplies.Add(1)
		return fmt.Errorf("rpcrdma: reply to XID %#x: %w", s.xid, xe)
	}
	s.grpVec = vec
	n := int(s.rep.SDDP.Length)
	c.m.sddpMsgs.Add(1)
	c.m.sddpBytes.Add(uint64(n))
	c.m.sddpGroups.Add(1)
	if call.ReplyPayload != nil && len(call.ReplyPayload) >= n && call.KeepPlaced {
		r.Body, r.Placed, r.PlacedVec = stream, n, vec
		c.m.sddpKept.Add(1)
		return nil
	}
	if call.ReplyPayload != nil && len(call.ReplyPayload) >= n {
		off := 0
		for _, p := range vec {
			off += copy(call.ReplyPayload[off:], p)
		}
		r.Body, r.Placed = stream, n
		return nil
	}
	d := s.rep.SDDP.Disp
	s.asm = append(s.asm[:0], stream[:d]...)
	for _, p := range vec {
		s.asm = append(s.asm, p...)
	}
	s.asm = append(append(s.asm, zeroPad4[:xdr.Pad(n)]...), stream[d:]...)
	r.Body = s.asm
	return nil
}
