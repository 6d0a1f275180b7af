package rpcrdma

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// The requester's side of send-based DDP in one Send: announcing its
// Receive Buffer Structure (PropRBStruct), sending a call's DDP-eligible
// argument in its Send, taking a reply's DDP-eligible result from its
// receive buffer.

// appendSDDPProp appends our PropRBStruct when SendDDP is on and our
// receives hold a DDP-targetable page.
func (c *Client) appendSDDPProp(pl []Prop) []Prop {
	if !c.opts.SendDDP {
		return pl
	}
	if rb, ok := ourRBStruct(c.opts.Inline); ok {
		pl = append(pl, Prop{Which: PropRBStruct, Data: rb.Append(nil)})
	}
	return pl
}

// setupSDDP decides, after the responder's RDMA2_CONNPROP_FINAL, whether
// calls use send-based DDP: only when SendDDP is on and the responder
// announced a structure with a DDP-targetable window (the rtrext
// draft's section 5.3). recvSize is its RDMA2_PROPID_RBSIZ; a structure
// longer than that is RDMA2_ERR_BAD_PROPVAL (section 8.3 wants them in
// agreement).
func (c *Client) setupSDDP(recvSize uint32) error {
	c.sddp = false
	if !c.peerHasRBS {
		return nil
	}
	if c.peerRBS.Length > recvSize {
		return &HeaderError{Kind: ErrPropVal, Reason: fmt.Sprintf("RDMA2_PROPID_RBSTRUCT of %d bytes, receive buffers of %d", c.peerRBS.Length, recvSize)}
	}
	if !c.opts.SendDDP {
		return nil
	}
	w, ok := c.peerRBS.window()
	if !ok {
		return nil
	}
	c.sddp, c.sddpWin, c.sddpLimit = true, w, min(c.inline.Send, int(c.peerRBS.Length), c.opts.Inline)
	return nil
}

// fitsSDDP tells whether the call m, under a header of at most hdrMax
// bytes (its plan's, Read list included), fits the responder's
// DDP-targetable window within our send buffer and its receives.
func (s *slot) fitsSDDP(m *sunrpc.Message, hdrMax int) bool {
	c := s.c
	if !m.HasPayload || len(m.Payload) == 0 {
		return false
	}
	_, _, ok := c.sddpWin.plan(hdrMax, len(m.Head)+len(m.Tail), len(m.Payload), c.sddpLimit, s.tbsn[:0])
	return ok
}

// encodeSDDP writes the call m of slot s as RDMA2_CALL_SDDP (h, with the
// reply's chunks, becomes one) into buf: the header, Head and Tail, zeros
// up to the responder's window, the argument and its pad (one copy of
// it, into the registered send buffer). fitsSDDP said it fits.
func (s *slot) encodeSDDP(m *sunrpc.Message, h *Header, buf []byte) ([]byte, error) {
	c := s.c
	h.HType = HTypeCallSDDP
	h.SDDP = SDDP{}
	hl := h.len2() - h.SDDP.len()
	sd, n, ok := c.sddpWin.plan(hl, len(m.Head)+len(m.Tail), len(m.Payload), min(c.sddpLimit, len(buf)), s.tbsn[:0])
	if !ok {
		return nil, fmt.Errorf("%w: call of %d bytes does not fit the responder's receive buffer structure", ErrInvalid, m.Len())
	}
	s.tbsn = sd.TBSN
	sd.Disp = uint32(len(m.Head))
	h.SDDP = sd
	if c.mangleSDDP != nil {
		c.mangleSDDP(&h.SDDP)
	}
	b, err := h.Encode(buf[:0])
	if err != nil {
		return nil, err
	}
	b = c.sddpWin.layout(buf, len(b), [][]byte{m.Head, m.Tail}, m.Payload, n)
	c.m.sddpMsgs.Add(1)
	c.m.sddpBytes.Add(uint64(len(m.Payload)))
	return b, nil
}

// callSDDP is how a call goes by send-based DDP: RDMA2_CALL_SDDP, its
// argument in the responder's DDP-targetable segments.
const callSDDP CallKind = 100

// sddpLocal tells whether we announced a Receive Buffer Structure.
func (c *Client) sddpLocal() bool {
	_, ok := ourRBStruct(c.opts.Inline)
	return c.opts.SendDDP && ok
}

// takeSDDP fills r from the RDMA2_REPLY_SDDP of slot s: Body is the
// Payload stream in the receive buffer; the result is copied once from
// where it landed into call.ReplyPayload when the caller gave one large
// enough (Placed), or, with call.KeepPlaced, handed on where it landed
// (r.PlacedVec, until the reply is released), else the stream is rebuilt
// with the result in it (in the slot's reassembly buffer). A placement that does not match our
// structure fails the call with the *XmitErr the rtrext draft's section
// 9.5 names (we do not send it: replies are not answered).
func (s *slot) takeSDDP(call *sunrpc.Call, r *sunrpc.Reply) error {
	c := s.c
	msg := c.recv.buf(c.recvMR, s.recvIdx)[:s.recvLen]
	rb, _ := ourRBStruct(c.opts.Inline)
	w, _ := rb.window()
	if len(s.grpRecv) > 0 || s.grpBad != nil {
		return s.takeSDDPGroup(call, r, msg, w)
	}
	stream, item, xe := w.locate(msg, s.hdrLen, &s.rep.SDDP, XmsID{XID: s.xid, Dir: 1})
	if xe != nil {
		c.m.badReplies.Add(1)
		return fmt.Errorf("rpcrdma: reply to XID %#x: %w", s.xid, xe)
	}
	if s.rep.SDDP.Items == 0 {
		r.Body = stream
		return nil
	}
	c.m.sddpMsgs.Add(1)
	c.m.sddpBytes.Add(uint64(len(item)))
	if call.ReplyPayload != nil && len(call.ReplyPayload) >= len(item) {
		r.Body, r.Placed = stream, len(item)
		if call.KeepPlaced {
			// Handed on where it landed, until the reply is released.
			s.one[0] = item
			r.PlacedVec = s.one[:]
			c.m.sddpKept.Add(1)
			return nil
		}
		copy(call.ReplyPayload, item)
		return nil
	}
	d := s.rep.SDDP.Disp
	s.asm = append(append(append(append(s.asm[:0], stream[:d]...), item...), zeroPad4[:xdr.Pad(len(item))]...), stream[d:]...)
	r.Body = s.asm
	return nil
}

var zeroPad4 [4]byte
