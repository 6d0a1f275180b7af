package rpcrdma

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// The requester's side of transmission groups (sddpgroup.go): a call's
// item sent across RDMA2_CALL_SDDP_MIDDLE Sends and a final
// RDMA2_CALL_SDDP, and a reply's group received.

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
	region, err := s.contBuffers(sends)
	if err != nil {
		return err
	}
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
	s.grpBufs = s.grpBufs[:0]
	for _, p := range s.grpRecv {
		s.grpBufs = append(s.grpBufs, c.recv.buf(c.recvMR, p.idx)[:p.n])
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
