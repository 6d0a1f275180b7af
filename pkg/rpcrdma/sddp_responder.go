package rpcrdma

import (
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// The responder's side of send-based DDP in one Send: taking a call's
// DDP-eligible argument from its receive buffer, sending a reply's
// DDP-eligible result in its Send.

// sddpLocal is the Receive Buffer Structure the responder announces: ok
// false when SendDDP is off or Inline holds no DDP-targetable page.
func (o *ServerOptions) sddpLocal() (RecvBufStruct, bool) {
	if !o.SendDDP {
		return RecvBufStruct{}, false
	}
	return ourRBStruct(o.Inline)
}

// locateSDDP returns the Payload stream and the placed argument of the
// RDMA2_CALL_SDDP msg (header of hl bytes in sl.hdr), from the receive
// buffer itself: arg stays valid until the slot's receive is reposted,
// after the reply. Errors: *XmitErr (answered RDMA2_XMTERR), ErrChunk
// (an RDMA2_CALL_SDDP that also carries Read chunks: RDMA2_ERR_BAD_XDR),
// or the XID check's.
func (sl *srvSlot) locateSDDP(msg []byte, hl int) (raw, arg []byte, err error) {
	h := &sl.hdr
	s := sl.c.s
	if len(h.Reads) != 0 {
		return nil, nil, headerErr(ErrChunk, PrefixLen, "RDMA2_CALL_SDDP with Read chunks")
	}
	rb, _ := ourRBStruct(s.opts.Inline)
	w, _ := rb.window()
	raw, arg, xe := w.locate(msg, hl, &h.SDDP, XmsID{XID: h.XID, Dir: 0})
	if xe != nil {
		return nil, nil, xe
	}
	if err := h.CheckXID(raw); err != nil {
		return nil, nil, err
	}
	if h.SDDP.Items > 0 {
		s.m.sddpMsgs.Add(1)
		s.m.sddpBytes.Add(uint64(len(arg)))
		if arg == nil {
			arg = []byte{}
		}
	}
	return raw, arg, nil
}

// replySDDP writes the reply m to the call in sl.hdr as RDMA2_REPLY_SDDP
// into buf (the slot's send buffer), its DDP-eligible result placed in
// the requester's DDP-targetable window; nil when the reply does not fit
// that layout (it then goes inline as planned).
func (sl *srvSlot) replySDDP(m *sunrpc.Message, buf []byte) []byte {
	c, s := sl.c, sl.c.s
	r := &sl.rep
	r.Vers, r.HType, r.Reply, r.HasReply = Version2, HTypeReplySDDP, r.Reply[:0], false
	r.SDDP = SDDP{}
	hl := r.len2() - r.SDDP.len()
	sd, n, ok := c.sddpWin.plan(hl, len(m.Head)+len(m.Tail), len(m.Payload), min(c.sddpLimit, len(buf)), sl.tbsn[:0])
	if !ok {
		r.HType = HTypeReplyInline
		return nil
	}
	sl.tbsn = sd.TBSN
	sd.Disp = uint32(len(m.Head))
	r.SDDP = sd
	if f := s.mangleReplySDDP.Load(); f != nil {
		(*f)(&r.SDDP)
	}
	b, err := r.Encode(buf[:0])
	if err != nil {
		r.HType, r.SDDP = HTypeReplyInline, SDDP{}
		return nil
	}
	b = c.sddpWin.layout(buf, len(b), [][]byte{m.Head, m.Tail}, m.Payload, n)
	s.m.sddpMsgs.Add(1)
	s.m.sddpBytes.Add(uint64(len(m.Payload)))
	return b
}
