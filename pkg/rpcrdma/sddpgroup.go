package rpcrdma

import (
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
