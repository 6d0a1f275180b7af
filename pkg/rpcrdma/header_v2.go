package rpcrdma

import (
	"errors"
	"fmt"
	"slices"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// RPC-over-RDMA version 2 transport headers
// (draft-ietf-nfsv4-rpcrdma-version-two, "the draft", sections 6 and 8).
// A version 2 header is a Header with Vers 2: the same chunk lists as
// version 1 (the draft's rpcrdma2_read_list, rpcrdma2_write_list and
// rpcrdma2_write_chunk encode exactly as RFC 8166's lists), under the
// header type HType instead of rdma_proc.

// Version2 is the rdma_vers of RPC-over-RDMA version 2 (the draft,
// section 4.3).
const Version2 = 2

// Sizes of version 2 headers, in bytes (the draft, section 8.4).
const (
	// PrefixLen is struct rpcrdma2_hdr_prefix: rdma_xid, rdma_vers,
	// rdma_credit, rdma_htype. An RDMA2_GRANT is only these.
	PrefixLen = 16
	// MinCall2Len is an RDMA2_CALL_INLINE without chunks:
	// rdma_inv_handle and three absent lists.
	MinCall2Len = PrefixLen + 4 + 4 + 4 + 4
	// MinReply2Len is an RDMA2_REPLY_INLINE without Write chunks.
	MinReply2Len = PrefixLen + 4
	// Middle2Len is RDMA2_CALL_MIDDLE and RDMA2_REPLY_MIDDLE:
	// rdma_remaining.
	Middle2Len = PrefixLen + 4
	// Error2MaxLen is the longest RDMA2_ERROR: rdma_err and two words.
	Error2MaxLen = PrefixLen + 12
)

// HType is rdma_htype, the header type of a version 2 message (the draft,
// sections 6.1 and 8.4). It is a uint32, not an enum: extensions add
// header types.
type HType uint32

// Version 2 header types (the draft, section 8.4).
const (
	HTypeError          HType = 4  // RDMA2_ERROR: Report Transport Error
	HTypeGrant          HType = 5  // RDMA2_GRANT: Grant Credits
	HTypeConnPropMiddle HType = 6  // RDMA2_CONNPROP_MIDDLE
	HTypeConnPropFinal  HType = 7  // RDMA2_CONNPROP_FINAL
	HTypeCallExternal   HType = 8  // RDMA2_CALL_EXTERNAL: the Call in a Call chunk
	HTypeCallMiddle     HType = 9  // RDMA2_CALL_MIDDLE: a continued Call
	HTypeCallInline     HType = 10 // RDMA2_CALL_INLINE: the only or last part of a Call
	HTypeReplyExternal  HType = 11 // RDMA2_REPLY_EXTERNAL: the Reply in a Reply chunk
	HTypeReplyMiddle    HType = 12 // RDMA2_REPLY_MIDDLE: a continued Reply
	HTypeReplyInline    HType = 13 // RDMA2_REPLY_INLINE: the only or last part of a Reply
)

func (t HType) String() string {
	switch t {
	case HTypeError:
		return "RDMA2_ERROR"
	case HTypeGrant:
		return "RDMA2_GRANT"
	case HTypeConnPropMiddle:
		return "RDMA2_CONNPROP_MIDDLE"
	case HTypeConnPropFinal:
		return "RDMA2_CONNPROP_FINAL"
	case HTypeCallExternal:
		return "RDMA2_CALL_EXTERNAL"
	case HTypeCallMiddle:
		return "RDMA2_CALL_MIDDLE"
	case HTypeCallInline:
		return "RDMA2_CALL_INLINE"
	case HTypeReplyExternal:
		return "RDMA2_REPLY_EXTERNAL"
	case HTypeReplyMiddle:
		return "RDMA2_REPLY_MIDDLE"
	case HTypeReplyInline:
		return "RDMA2_REPLY_INLINE"
	case HTypeReplyRead, HTypeDone:
		return t.rprcString()
	case HTypeCallSDDP:
		return "RDMA2_CALL_SDDP"
	case HTypeReplySDDP:
		return "RDMA2_REPLY_SDDP"
	case HTypeXmitErr:
		return "RDMA2_XMTERR"
	case HTypeCallSDDPMiddle:
		return "RDMA2_CALL_SDDP_MIDDLE"
	case HTypeReplySDDPMiddle:
		return "RDMA2_REPLY_SDDP_MIDDLE"
	}
	return fmt.Sprintf("rdma_htype(%d)", uint32(t))
}

// Errcode2 is rdma_err of an RDMA2_ERROR (the draft, sections 7 and 8.4).
type Errcode2 uint32

// Version 2 error codes (the draft, section 8.4).
const (
	Err2Vers          Errcode2 = 1   // RDMA2_ERR_VERS: rdma_vers_low, rdma_vers_high follow
	Err2BadXDR        Errcode2 = 2   // RDMA2_ERR_BAD_XDR
	Err2BadPropVal    Errcode2 = 3   // RDMA2_ERR_BAD_PROPVAL
	Err2InvalHType    Errcode2 = 4   // RDMA2_ERR_INVAL_HTYPE
	Err2InvalCont     Errcode2 = 5   // RDMA2_ERR_INVAL_CONT
	Err2ReadChunks    Errcode2 = 6   // RDMA2_ERR_READ_CHUNKS: rdma_max_chunks follows
	Err2WriteChunks   Errcode2 = 7   // RDMA2_ERR_WRITE_CHUNKS: rdma_max_chunks follows
	Err2Segments      Errcode2 = 8   // RDMA2_ERR_SEGMENTS: rdma_max_segments follows
	Err2WriteResource Errcode2 = 9   // RDMA2_ERR_WRITE_RESOURCE: rdma_chunk_index, rdma_length_needed follow
	Err2ReplyResource Errcode2 = 10  // RDMA2_ERR_REPLY_RESOURCE: rdma_length_needed follows
	Err2VersMismatch  Errcode2 = 11  // RDMA2_ERR_VERS_MISMATCH
	Err2System        Errcode2 = 100 // RDMA2_ERR_SYSTEM
)

// Errcodes2 lists every version 2 error code, in code order.
var Errcodes2 = []Errcode2{Err2Vers, Err2BadXDR, Err2BadPropVal, Err2InvalHType, Err2InvalCont, Err2ReadChunks,
	Err2WriteChunks, Err2Segments, Err2WriteResource, Err2ReplyResource, Err2VersMismatch, Err2System}

func (c Errcode2) String() string {
	switch c {
	case Err2Vers:
		return "RDMA2_ERR_VERS"
	case Err2BadXDR:
		return "RDMA2_ERR_BAD_XDR"
	case Err2BadPropVal:
		return "RDMA2_ERR_BAD_PROPVAL"
	case Err2InvalHType:
		return "RDMA2_ERR_INVAL_HTYPE"
	case Err2InvalCont:
		return "RDMA2_ERR_INVAL_CONT"
	case Err2ReadChunks:
		return "RDMA2_ERR_READ_CHUNKS"
	case Err2WriteChunks:
		return "RDMA2_ERR_WRITE_CHUNKS"
	case Err2Segments:
		return "RDMA2_ERR_SEGMENTS"
	case Err2WriteResource:
		return "RDMA2_ERR_WRITE_RESOURCE"
	case Err2ReplyResource:
		return "RDMA2_ERR_REPLY_RESOURCE"
	case Err2VersMismatch:
		return "RDMA2_ERR_VERS_MISMATCH"
	case Err2System:
		return "RDMA2_ERR_SYSTEM"
	}
	return fmt.Sprintf("rdma_err(%d)", uint32(c))
}

// known tells whether c is a code of the draft.
func (c Errcode2) known() bool { return slices.Contains(Errcodes2, c) }

// armLen is the length in bytes of the union arm after rdma_err.
func (c Errcode2) armLen() int {
	switch c {
	case Err2Vers, Err2WriteResource:
		return 8
	case Err2ReadChunks, Err2WriteChunks, Err2Segments, Err2ReplyResource:
		return 4
	}
	return 0
}

// Error2 is the body of an RDMA2_ERROR (the draft, section 6.3.1, union
// rpcrdma2_hdr_error). Which fields mean something depends on Code.
type Error2 struct {
	Code Errcode2
	// VersLow and VersHigh: RDMA2_ERR_VERS (rdma_vrange).
	VersLow, VersHigh uint32
	// MaxChunks: RDMA2_ERR_READ_CHUNKS and RDMA2_ERR_WRITE_CHUNKS;
	// MaxSegments: RDMA2_ERR_SEGMENTS.
	MaxChunks, MaxSegments uint32
	// ChunkIndex (1-based, 0: unknown) and LengthNeeded (bytes):
	// RDMA2_ERR_WRITE_RESOURCE; LengthNeeded alone:
	// RDMA2_ERR_REPLY_RESOURCE.
	ChunkIndex, LengthNeeded uint32
}

// Header2 holds the fields of a version 2 header beyond those it shares
// with version 1; Header embeds it.
type Header2 struct {
	HType HType // rdma_htype
	// InvHandle is rdma_inv_handle of RDMA2_CALL_INLINE and
	// RDMA2_CALL_EXTERNAL: an R_key of this header the responder may
	// invalidate with Send With Invalidate, 0 for none (section 6.5).
	InvHandle uint32
	// Remaining is rdma_remaining of the *_MIDDLE types: the bytes of the
	// RPC message still to come after this fragment (sections 6.3.6,
	// 6.3.9).
	Remaining uint32
	// Err is the body of RDMA2_ERROR.
	Err Error2
	// Props is rdma_props of RDMA2_CONNPROP_MIDDLE and _FINAL, in wire
	// order; each Data aliases the decoded message.
	Props []Prop
	// Handle is rdma_handle of RDMA2_DONE (header_rprc.go): the R_key of the
	// first segment of the Read chunk pulled.
	Handle uint32
	// SDDP is struct rpcrdma2_sddp of RDMA2_CALL_SDDP and
	// RDMA2_REPLY_SDDP (header_sddp.go); its TBSN slice is reused.
	SDDP SDDP
	// XNum is rdma_xnum of RDMA2_CALL_SDDP_MIDDLE and
	// RDMA2_REPLY_SDDP_MIDDLE (sddpgroup.go): the Send's number in its
	// transmission group, from 0.
	XNum uint32
	// XmitErr is the body of RDMA2_XMTERR (header_sddp.go).
	XmitErr XmitErr
}

// Limits on version 2 headers beyond Limits.
const (
	// MaxProps bounds the properties of one CONNPROP message a decoder
	// accepts (the draft sets none); more is RDMA2_ERR_BAD_XDR.
	MaxProps = 64
)

// v1Proc is the version 1 procedure a version 2 header type stands for in
// the code both versions share: RDMA_MSG for the *_INLINE types (the
// Payload stream follows), RDMA_NOMSG for the *_EXTERNAL types (it is in a
// chunk), RDMA_ERROR; other types map to no version 1 procedure.
func (t HType) v1Proc() Proc {
	switch t {
	case HTypeCallInline, HTypeReplyInline, HTypeCallSDDP, HTypeReplySDDP:
		return ProcMsg
	case HTypeCallExternal, HTypeReplyExternal:
		return ProcNoMsg
	case HTypeError:
		return ProcError
	}
	return Proc(t) | 0x80000000
}

// len2 returns the length in bytes of a version 2 header's encoding.
func (h *Header) len2() int {
	n := PrefixLen
	lists := func(reads bool, reply bool) {
		if reads {
			for _, r := range h.Reads {
				if r.Position != 0 {
					n += ReadSegmentLen
				}
			}
			n += 4
		}
		for _, w := range h.Writes {
			n += 8 + SegmentLen*len(w)
		}
		n += 4
		if reply {
			n += 4
			if h.hasReply() {
				n += 4 + SegmentLen*len(h.Reply)
			}
		}
	}
	switch h.HType {
	case HTypeCallInline:
		n += 4
		lists(true, true)
	case HTypeCallSDDP:
		n += 4
		lists(true, true)
		n += h.SDDP.len()
	case HTypeReplySDDP:
		lists(false, false)
		n += h.SDDP.len()
	case HTypeXmitErr:
		n += h.XmitErr.len()
	case HTypeCallExternal:
		n += 4
		n += ReadSegmentLen*len(h.PositionZero()) + 4
		lists(true, true)
	case HTypeReplyInline:
		lists(false, false)
	case HTypeReplyExternal:
		lists(false, true)
	case HTypeCallMiddle, HTypeReplyMiddle, HTypeCallSDDPMiddle, HTypeReplySDDPMiddle:
		n += 4
	case HTypeError:
		n += 4 + h.Err.Code.armLen()
	case HTypeReplyRead, HTypeDone:
		n += h.lenRPRC()
	case HTypeConnPropMiddle, HTypeConnPropFinal:
		n += 4
		for _, p := range h.Props {
			n += 8 + xdr.RoundUp(len(p.Data))
		}
	}
	return n
}

// check2 reports why a version 2 h must not be sent, or nil.
func (h *Header) check2() error {
	switch h.HType {
	case HTypeGrant, HTypeCallMiddle, HTypeReplyMiddle, HTypeConnPropMiddle, HTypeConnPropFinal, HTypeCallSDDPMiddle, HTypeReplySDDPMiddle:
		return nil
	case HTypeXmitErr:
		if e := &h.XmitErr; e.Code < XmitErrBadHMT || e.Code > XmitErrBadPL || e.Bad.Dir > 1 || e.Lead.Dir > 1 {
			return headerErr(ErrInvalid, 16, "RDMA2_XMTERR: optx_err %d, xmsi_dir %d/%d", uint32(e.Code), e.Bad.Dir, e.Lead.Dir)
		}
		return nil
	case HTypeCallSDDP, HTypeReplySDDP:
		if s := &h.SDDP; s.Items > 1 || s.Items < 0 || s.Items == 1 && (len(s.TBSN) == 0 || len(s.TBSN) > MaxTBSN) {
			return headerErr(ErrInvalid, 16, "%v: %d items, %d segments", h.HType, s.Items, len(s.TBSN))
		}
	case HTypeError:
		if !h.Err.Code.known() {
			return headerErr(ErrInvalid, 16, "unknown rdma_err %d", uint32(h.Err.Code))
		}
		return nil
	case HTypeReplyRead, HTypeDone:
		return h.checkRPRC()
	case HTypeCallInline, HTypeCallExternal, HTypeReplyInline, HTypeReplyExternal:
	default:
		return headerErr(ErrInvalid, 12, "unknown rdma_htype %d", uint32(h.HType))
	}
	isCall := h.HType == HTypeCallInline || h.HType == HTypeCallExternal || h.HType == HTypeCallSDDP
	if !isCall && len(h.Reads) > 0 {
		return headerErr(ErrInvalid, 16, "%v with a Read list", h.HType)
	}
	if (h.HType == HTypeReplyInline || h.HType == HTypeReplySDDP) && h.hasReply() {
		return headerErr(ErrInvalid, 16, "RDMA2_REPLY_INLINE has no Reply chunk")
	}
	if h.HType == HTypeReplyExternal && !h.hasReply() {
		return headerErr(ErrInvalid, 16, "RDMA2_REPLY_EXTERNAL needs a Reply chunk (section 6.3.8)")
	}
	if h.HType == HTypeCallExternal && len(h.PositionZero()) == 0 {
		return headerErr(ErrInvalid, 16, "RDMA2_CALL_EXTERNAL needs a Call chunk (section 6.3.5)")
	}
	if (h.HType == HTypeCallInline || h.HType == HTypeCallSDDP) && len(h.PositionZero()) != 0 {
		return headerErr(ErrInvalid, 16, "RDMA2_CALL_INLINE with a Position-zero Read chunk (section 6.3.7)")
	}
	return h.checkChunks()
}

// encode2 appends a version 2 header (the draft, section 8.4): the
// prefix, then the body of HType. For the call types, the Read segments
// at Position 0 go into rdma_call (RDMA2_CALL_EXTERNAL) and the others
// into rdma_reads.
func (h *Header) encode2(dst []byte) ([]byte, error) {
	if err := h.check2(); err != nil {
		return dst, err
	}
	dst = slices.Grow(dst, h.len2())
	dst = be.AppendUint32(dst, h.XID)
	dst = be.AppendUint32(dst, Version2)
	dst = be.AppendUint32(dst, h.Credits)
	dst = be.AppendUint32(dst, uint32(h.HType))
	switch h.HType {
	case HTypeCallInline, HTypeCallExternal, HTypeCallSDDP:
		dst = be.AppendUint32(dst, h.InvHandle)
		if h.HType == HTypeCallExternal {
			dst = appendReadList(dst, h.Reads, zeroPosition)
		}
		dst = appendReadList(dst, h.Reads, dataPosition)
		dst = h.appendWriteList(dst)
		dst = h.appendReplyChunk(dst)
		if h.HType == HTypeCallSDDP {
			dst = h.SDDP.append(dst)
		}
	case HTypeReplyInline:
		dst = h.appendWriteList(dst)
	case HTypeReplySDDP:
		dst = h.appendWriteList(dst)
		dst = h.SDDP.append(dst)
	case HTypeXmitErr:
		dst = h.XmitErr.append(dst)
	case HTypeReplyExternal:
		dst = h.appendWriteList(dst)
		dst = h.appendReplyChunk(dst)
	case HTypeCallMiddle, HTypeReplyMiddle:
		dst = be.AppendUint32(dst, h.Remaining)
	case HTypeCallSDDPMiddle, HTypeReplySDDPMiddle:
		dst = be.AppendUint32(dst, h.XNum)
	case HTypeError:
		e := &h.Err
		dst = be.AppendUint32(dst, uint32(e.Code))
		switch e.Code {
		case Err2Vers:
			dst = be.AppendUint32(dst, e.VersLow)
			dst = be.AppendUint32(dst, e.VersHigh)
		case Err2ReadChunks, Err2WriteChunks:
			dst = be.AppendUint32(dst, e.MaxChunks)
		case Err2Segments:
			dst = be.AppendUint32(dst, e.MaxSegments)
		case Err2WriteResource:
			dst = be.AppendUint32(dst, e.ChunkIndex)
			dst = be.AppendUint32(dst, e.LengthNeeded)
		case Err2ReplyResource:
			dst = be.AppendUint32(dst, e.LengthNeeded)
		}
	case HTypeConnPropMiddle, HTypeConnPropFinal:
		dst = appendProps(dst, h.Props)
	case HTypeReplyRead, HTypeDone:
		dst = h.appendRPRC(dst)
	}
	return dst, nil
}

// Decode2 reads a version 2 transport header from the start of msg into
// h, reusing h's slices, and returns its length in bytes: for the types
// that carry an RPC message fragment (*_INLINE, *_MIDDLE) it starts at
// msg[n:]. lim bounds the chunk lists (nil: the defaults); a CONNPROP may
// hold at most MaxProps properties. h.Proc is set to the version 1
// procedure the type stands for (HType.v1Proc), so that the code both
// versions share (PositionZero, CheckReply, the planners) reads it.
//
// As Decode, on error n is 0 and h holds the prefix words read so far.
// Errors are *HeaderError; Errcode2Of gives the RDMA2_ERROR code a
// responder answers with (the draft, section 7):
//
//   - ErrShort: msg ends inside the header (RDMA2_ERR_BAD_XDR; shorter
//     than the prefix: silently discarded, section 7);
//   - ErrVers: rdma_vers is not 2 (RDMA2_ERR_VERS);
//   - ErrHType: an unknown rdma_htype (RDMA2_ERR_INVAL_HTYPE, section
//     6.1);
//   - ErrChunk: bad XDR (RDMA2_ERR_BAD_XDR): an optional-data
//     discriminator other than 0 or 1, read positions not multiples of 4
//     or decreasing (section 4.5.1.1), a Call chunk segment at a nonzero
//     position or a data item Read chunk at position 0 (sections 6.3.5,
//     6.3.7), an RDMA2_CALL_EXTERNAL without a Call chunk, an
//     RDMA2_REPLY_EXTERNAL without a Reply chunk (section 6.3.8), a
//     segment that wraps, a property whose data runs past the message or
//     more than MaxProps properties, an RDMA2_ERROR with an unknown code
//     (which a receiver silently discards, section 7);
//   - ErrWriteChunks, ErrSegments (which also match ErrChunk): more Write
//     chunks than lim.MaxWriteChunks (RDMA2_ERR_WRITE_CHUNKS, section
//     7.3.2); more segments than lim allows in the Read list, in a chunk
//     or in the header (RDMA2_ERR_SEGMENTS, section 7.3.3). A responder
//     answers more Read chunks than it processes with ErrReadChunks
//     (RDMA2_ERR_READ_CHUNKS, section 7.3.1).
//
// Bytes after a header that carries no RPC message are ignored.
func (h *Header) Decode2(msg []byte, lim *Limits) (n int, err error) {
	h.Reset()
	htype, err := h.readPrefix(msg)
	if err != nil {
		return 0, err
	}
	h.HType = HType(htype)
	h.Proc = h.HType.v1Proc()
	if h.Vers != Version2 {
		return 0, headerErr(ErrVers, 4, "rdma_vers %d", h.Vers)
	}
	r := listReader{lim: lim.orDefault(), v2: true}
	r.d.Reset(msg[PrefixLen:])
	switch h.HType {
	case HTypeCallInline, HTypeCallExternal, HTypeCallSDDP:
		if r.d.Remaining() < 4 {
			return 0, headerErr(ErrShort, PrefixLen, "missing rdma_inv_handle")
		}
		h.InvHandle = r.d.Uint32()
		if h.HType == HTypeCallExternal {
			if err = r.readList(h, zeroPosition); err == nil && len(h.Reads) == 0 {
				err = headerErr(ErrChunk, PrefixLen+4, "RDMA2_CALL_EXTERNAL without a Call chunk (section 6.3.5)")
			}
		}
		if err == nil {
			err = r.readList(h, dataPosition)
		}
		if err == nil {
			err = r.writeList(h)
		}
		if err == nil {
			err = r.replyChunk(h)
		}
		if err == nil && h.HType == HTypeCallSDDP {
			err = h.SDDP.decode(&r.d, r.off())
		}
	case HTypeReplySDDP:
		if err = r.writeList(h); err == nil {
			err = h.SDDP.decode(&r.d, r.off())
		}
	case HTypeXmitErr:
		err = h.XmitErr.decode(&r.d, r.off())
	case HTypeReplyInline, HTypeReplyExternal:
		err = r.writeList(h)
		if err == nil && h.HType == HTypeReplyExternal {
			if err = r.replyChunk(h); err == nil && !h.HasReply {
				err = headerErr(ErrChunk, r.off()-4, "RDMA2_REPLY_EXTERNAL without a Reply chunk (section 6.3.8)")
			}
		}
	case HTypeCallMiddle, HTypeReplyMiddle:
		if r.d.Remaining() < 4 {
			return 0, headerErr(ErrShort, PrefixLen, "missing rdma_remaining")
		}
		h.Remaining = r.d.Uint32()
	case HTypeCallSDDPMiddle, HTypeReplySDDPMiddle:
		if r.d.Remaining() < 4 {
			return 0, headerErr(ErrShort, PrefixLen, "missing rdma_xnum")
		}
		h.XNum = r.d.Uint32()
	case HTypeGrant:
	case HTypeError:
		err = h.decodeError2(&r.d)
	case HTypeConnPropMiddle, HTypeConnPropFinal:
		h.Props, err = decodeProps(&r.d, h.Props[:0])
	case HTypeReplyRead, HTypeDone:
		err = h.decodeRPRC(&r)
	default:
		err = headerErr(ErrHType, 12, "unknown rdma_htype %d", uint32(h.HType))
	}
	if err != nil {
		return 0, err
	}
	return r.off(), nil
}

func (h *Header) decodeError2(d *xdr.Decoder) error {
	if d.Remaining() < 4 {
		return headerErr(ErrShort, PrefixLen, "RDMA2_ERROR without rdma_err")
	}
	e := &h.Err
	e.Code = Errcode2(d.Uint32())
	if !e.Code.known() {
		return headerErr(ErrChunk, PrefixLen, "unknown rdma_err %d (silently discarded, section 7)", uint32(e.Code))
	}
	if d.Remaining() < e.Code.armLen() {
		return headerErr(ErrShort, PrefixLen+4, "%v without its %d-byte argument", e.Code, e.Code.armLen())
	}
	switch e.Code {
	case Err2Vers:
		e.VersLow, e.VersHigh = d.Uint32(), d.Uint32()
	case Err2ReadChunks, Err2WriteChunks:
		e.MaxChunks = d.Uint32()
	case Err2Segments:
		e.MaxSegments = d.Uint32()
	case Err2WriteResource:
		e.ChunkIndex, e.LengthNeeded = d.Uint32(), d.Uint32()
	case Err2ReplyResource:
		e.LengthNeeded = d.Uint32()
	}
	return nil
}

// Errcode2Of returns the RDMA2_ERROR code that answers a message whose
// version 2 header failed to decode or to be processed with err (the
// draft, section 7): RDMA2_ERR_VERS, _INVAL_HTYPE, _BAD_PROPVAL,
// _INVAL_CONT, _VERS_MISMATCH, _READ_CHUNKS, _WRITE_CHUNKS, _SEGMENTS,
// _BAD_XDR for other header errors (ErrChunk), and RDMA2_ERR_SYSTEM for
// anything else. For the three with a maximum, max is the limit to report.
func Errcode2Of(err error) (code Errcode2, max uint32) {
	var he *HeaderError
	errors.As(err, &he)
	var re *resourceError
	if errors.As(err, &re) {
		return re.e.Code, 0
	}
	var se *systemError
	if errors.As(err, &se) {
		return Err2System, 0
	}
	switch {
	case errors.Is(err, ErrVersMismatch):
		return Err2VersMismatch, 0
	case errors.Is(err, ErrVers):
		return Err2Vers, 0
	case errors.Is(err, ErrHType):
		return Err2InvalHType, 0
	case errors.Is(err, ErrPropVal):
		return Err2BadPropVal, 0
	case errors.Is(err, ErrCont):
		return Err2InvalCont, 0
	case errors.Is(err, ErrReadChunks), errors.Is(err, ErrWriteChunks), errors.Is(err, ErrSegments):
		if he != nil {
			max = he.Max
		}
		switch {
		case errors.Is(err, ErrReadChunks):
			return Err2ReadChunks, max
		case errors.Is(err, ErrWriteChunks):
			return Err2WriteChunks, max
		}
		return Err2Segments, max
	case errors.Is(err, ErrChunk):
		return Err2BadXDR, 0
	}
	return Err2System, 0
}
