package rpcrdma

import (
	"unsafe"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Placement of a DDP-eligible item by send-based DDP (the rtrext draft's
// sections 7.2 and 7.3), for one transmission: the sender lays the
// message out as its header, the Payload stream without the item, zeros
// up to the receiver's first DDP-targetable segment, then the item and
// its XDR pad; the receiver takes the item where it landed.

// plan tells whether a message can be sent by send-based DDP into a
// receive whose DDP-targetable window is w: a header of hl bytes without
// its rpcrdma2_sddp, a Payload stream of sl bytes without the item, an
// item of il bytes (il > 0), the whole message at most limit bytes. It
// returns the rpcrdma2_sddp to send (Disp still to be set) and the
// message's length; ok is false when the layout does not fit (the
// header and stream reach the window, the item is larger than the
// window, or the message than limit): the sender then uses chunks.
func (w ddpWindow) plan(hl, sl, il, limit int, tbsn []uint32) (s SDDP, n int, ok bool) {
	if il <= 0 || w.SegLen <= 0 {
		return SDDP{}, 0, false
	}
	padded := xdr.RoundUp(il)
	segs := (padded + w.SegLen - 1) / w.SegLen
	s = SDDP{PSLen: uint32(sl), Items: 1, Length: uint32(il), TBSN: tbsn[:0]}
	for i := range segs {
		s.TBSN = append(s.TBSN, uint32(i))
	}
	n = w.Start + padded
	if segs > MaxTBSN || padded > w.Size || hl+s.len()+sl > w.Start || n > limit {
		return SDDP{}, 0, false
	}
	return s, n, true
}

// layout writes the message into buf (at least n bytes, from plan):
// header hdr (already encoded at buf's start, hlen bytes), stream, zeros
// up to w.Start, item and its pad. It returns buf[:n].
func (w ddpWindow) layout(buf []byte, hlen int, stream [][]byte, item []byte, n int) []byte {
	off := hlen
	for _, p := range stream {
		off += copy(buf[off:], p)
	}
	clear(buf[off:w.Start])
	m := copy(buf[w.Start:], item)
	clear(buf[w.Start+m : n])
	return buf[:n]
}

// locate finds the Payload stream and the placed item of a message msg
// (the n bytes received into a buffer laid out with window w), whose
// header of hl bytes carries s. The item aliases msg: no byte is copied.
// A placement that does not match the structure is a Transmit Error
// (the rtrext draft's section 9.5) about transmission id:
//
//   - OPTXERR_BADPL: rdma_pslen runs past the message (Value the length,
//     Max what the message holds), or xmdmi_disp is not a multiple of 4
//     or lies past the Payload stream (Value the displacement, Max
//     rdma_pslen);
//   - OPTXERR_BADTBSN: a segment number past the window (Max the last
//     DDP-targetable segment), or not following the previous one (Min =
//     Max = the one expected);
//   - OPTXERR_BADOFF: xmdl_offset not a multiple of 4 or not inside the
//     first segment (Max the segment length - 1); the item overruns the
//     segments named (Value offset + length, Max their bytes), the bytes
//     received (Value its end, Max the message length), or starts inside
//     the header and stream (Value its start, Min their end).
func (w ddpWindow) locate(msg []byte, hl int, s *SDDP, id XmsID) (stream, item []byte, xe *XmitErr) {
	bad := func(code XmitErrCode, v, lo, hi int) ([]byte, []byte, *XmitErr) {
		return nil, nil, &XmitErr{Bad: id, Code: code, Value: uint32(v), Min: uint32(lo), Max: uint32(max(hi, 0))}
	}
	n := len(msg)
	if uint64(s.PSLen) > uint64(n-hl) {
		return bad(XmitErrBadPL, int(s.PSLen), 0, n-hl)
	}
	end := hl + int(s.PSLen)
	stream = msg[hl:end:end]
	if s.Items == 0 {
		return stream, nil, nil
	}
	if s.Disp%4 != 0 || s.Disp > s.PSLen {
		return bad(XmitErrBadPL, int(s.Disp), 0, int(s.PSLen))
	}
	for i, t := range s.TBSN {
		if uint64(t) >= uint64(w.Segs) {
			return bad(XmitErrBadTBSN, int(t), 0, w.Segs-1)
		}
		if i > 0 && t != s.TBSN[0]+uint32(i) {
			want := int(s.TBSN[0]) + i
			return bad(XmitErrBadTBSN, int(t), want, want)
		}
	}
	if s.Offset%4 != 0 || uint64(s.Offset) >= uint64(w.SegLen) {
		return bad(XmitErrBadOff, int(s.Offset), 0, w.SegLen-1)
	}
	room := uint64(len(s.TBSN)) * uint64(w.SegLen)
	if uint64(s.Offset)+uint64(s.Length) > room {
		return bad(XmitErrBadOff, int(min(uint64(s.Offset)+uint64(s.Length), 1<<32-1)), 0, int(room))
	}
	start := w.Start + int(s.TBSN[0])*w.SegLen + int(s.Offset)
	if start < end {
		return bad(XmitErrBadOff, start, end, n)
	}
	stop := start + int(s.Length)
	if stop > n {
		return bad(XmitErrBadOff, stop, 0, n)
	}
	return stream, msg[start:stop:stop], nil
}

// pageAligned returns n zeroed bytes starting on a PageSize boundary, so
// that the DDP-targetable segments of receive buffers laid out in it
// (ourRBStruct, newRecvLayout) are page-aligned in memory as announced.
func pageAligned(n int) []byte {
	b := make([]byte, n+PageSize)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (PageSize - 1))
	return b[off : off+n : off+n]
}

// middle builds in buf (at least the window's end) a middle Send of a
// transmission group: h encoded (RDMA2_*_SDDP_MIDDLE), zeros up to the
// window, then the window's worth of piece (the item from this Send's
// first segment on).
func (w ddpWindow) middle(buf []byte, h *Header, piece []byte) ([]byte, error) {
	b, err := h.Encode(buf[:0])
	if err != nil {
		return nil, err
	}
	clear(buf[len(b):w.Start])
	copy(buf[w.Start:w.Start+w.Size], piece)
	return buf[:w.Start+w.Size], nil
}

// SDDPInline is the send and receive buffer size, in bytes, a mount or
// server with send-based DDP on (the default of both) uses: a 1 KiB
// segment for the header and three DDP-targetable pages (ourRBStruct),
// so WRITE and READ data of 4 to 12 KiB goes inside the Send (the default
// OurInline of 4096 holds no DDP-targetable page). It takes about 4.5
// times the buffer memory of a connection, not more (the package doc's
// "Memory" under Send-based DDP).
const SDDPInline = 16 << 10
