package rpcrdma

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Send-based DDP (draft-dnoveck-rpcrdma-rtrext, "the rtrext draft",
// sections 3, 7 and 8) as an extension of RPC-over-RDMA version 2: the
// Receive Buffer Structure property, the message DDP structure carried by
// two new header types, and the Transmit Error header. The XDR the
// rtrext draft leaves "TBD" is defined so (see the package doc's
// "Send-based DDP" section for the whole definition):
//
//	const RDMA2_PROPID_RBSTRUCT = 17;       /* the rtrext draft's 8.3 */
//	struct xmrbs_seg {
//	        uint32          xmrseg_length;  /* bytes, a multiple of 4 */
//	        uint32          xmrseg_align;   /* 0 or a power of 2 */
//	        uint32          xmrseg_flags;   /* XMRSFLAG_* */
//	};
//	const uint32 XMRSFLAG_DDP = 0x01;
//	struct xmrbs_group {
//	        uint32          xmrgrp_count;   /* at least 1 */
//	        xmrbs_seg       xmrgrp_info;
//	};
//	struct xmrbs_buf {
//	        uint32          xmrbuf_length;  /* sum of the segments */
//	        xmrbs_group     xmrbuf_groups<RDMA2_RBS_MAXGROUPS>;
//	};
//
//	const XMDTYPE_TBSN = 2;
//	struct xmddp_mitem {                    /* 7.3, the TBSN arm only */
//	        xmddp_vsdisp    xmdmi_disp;
//	        xmddp_itemlen   xmdmi_length;
//	        xmddp_type      xmdmi_type;     /* XMDTYPE_TBSN */
//	        xmddp_itemlen   xmdl_offset;
//	        xmddp_tbsn      xmdl_bsnum<RDMA2_SDDP_MAXTBSN>;
//	};
//	struct rpcrdma2_sddp {
//	        xmddp_pldisp    rdma_pslen;     /* Payload stream bytes */
//	        xmddp_mitem     rdma_ddp<1>;    /* xmddp_grpinfo */
//	};
//
//	const RDMA2_CALL_SDDP = 18;   /* RDMA2_CALL_INLINE's body, then
//	                                 struct rpcrdma2_sddp */
//	const RDMA2_REPLY_SDDP = 19;  /* RDMA2_REPLY_INLINE's body, then
//	                                 struct rpcrdma2_sddp */
//
//	const RDMA2_XMTERR = 20;      /* the rtrext draft's optxmt_err */
//	struct xms_id {
//	        uint32          xmsi_xid;
//	        msg_type        xmsi_dir;       /* 0 CALL, 1 REPLY */
//	        uint32          xmsi_seq;       /* 0: the only transmission */
//	};
//	union optx_info switch (optx_err optxe_which) {
//	case OPTXERR_BADHMT: case OPTXERR_BADOMT:
//	case OPTXERR_BADSEQ: case OPTXERR_BADXID:
//	        uint32 optxi_expect; uint32 optxi_current;
//	case OPTXERR_BADCONT:
//	        void;
//	case OPTXERR_BADOFF: case OPTXERR_BADTBSN: case OPTXERR_BADPL:
//	        uint32 optxi_value; uint32 optxi_min; uint32 optxi_max;
//	};
//	struct rpcrdma2_hdr_xmterr {
//	        xms_id          optxe_bad;
//	        xms_id          *optxe_lead;
//	        optx_info       optxe_info;
//	};

// PropRBStruct is RDMA2_PROPID_RBSTRUCT, the Receive Buffer Structure of
// the sender's receives (the rtrext draft's section 8.3): an xmrbs_buf.
// Absent, the structure is one segment of the receive buffer size, not
// DDP-targetable (its default), and nothing is sent by send-based DDP.
const PropRBStruct PropID = 17

// Header types of the extension.
const (
	// HTypeCallSDDP (RDMA2_CALL_SDDP) is RDMA2_CALL_INLINE whose
	// DDP-eligible argument was excised from the Payload stream and
	// placed in DDP-targetable segments of the receive (Header2.SDDP).
	HTypeCallSDDP HType = 18
	// HTypeReplySDDP (RDMA2_REPLY_SDDP) is the same for an
	// RDMA2_REPLY_INLINE and its DDP-eligible result.
	HTypeReplySDDP HType = 19
	// HTypeXmitErr (RDMA2_XMTERR) is the rtrext draft's Transmit Error
	// (section 9.5): a transmission whose placement did not match the
	// receiver's announced structure (Header2.XmitErr).
	HTypeXmitErr HType = 20
	// HTypeCallSDDPMiddle (RDMA2_CALL_SDDP_MIDDLE) is a Send of a
	// transmission group before its RDMA2_CALL_SDDP: it carries the part
	// of the placed argument its DDP-targetable segments hold, and no
	// Payload stream (Header2.XNum; sddpgroup.go).
	HTypeCallSDDPMiddle HType = 21
	// HTypeReplySDDPMiddle (RDMA2_REPLY_SDDP_MIDDLE) is the same before
	// an RDMA2_REPLY_SDDP.
	HTypeReplySDDPMiddle HType = 22
)

// RBSegDDP is XMRSFLAG_DDP: the segment may be targeted by send-based
// DDP.
const RBSegDDP uint32 = 0x01

// Limits of the extension's XDR; more is RDMA2_ERR_BAD_XDR.
const (
	MaxRBGroups = 16 // RDMA2_RBS_MAXGROUPS: groups in an xmrbs_buf
	MaxTBSN     = 64 // RDMA2_SDDP_MAXTBSN: segments named by one item
	// XMDTypeTBSN is XMDTYPE_TBSN, the only xmddp_loc arm accepted.
	XMDTypeTBSN = 2
)

// RBSeg is xmrbs_seg: one receive buffer segment of Length bytes whose
// memory is aligned to Align bytes (0: no alignment), Flags RBSeg*.
type RBSeg struct {
	Length, Align, Flags uint32
}

// RBGroup is xmrbs_group: Count consecutive segments alike.
type RBGroup struct {
	Count uint32
	Seg   RBSeg
}

// RecvBufStruct is xmrbs_buf, a receive buffer of Length bytes made of
// Groups of segments, in buffer order (the rtrext draft's section 7.2).
type RecvBufStruct struct {
	Length uint32
	Groups []RBGroup
}

// PageSize is the alignment of the DDP-targetable segments we announce.
const PageSize = 4096

// rbHeaderLen is the length of the first segment of our receive buffers
// when they are structured for send-based DDP (ourRBStruct): room for the
// transport header and the Payload stream of a call or reply whose item
// is placed (a READ reply's or WRITE call's header, file handle and
// credential), and the zeros a sender puts between them and the first
// DDP-targetable page.
const rbHeaderLen = 1024

// ourRBStruct is the structure of our receive buffers of inline bytes: a
// segment of rbHeaderLen bytes for the transport header and the Payload
// stream, then inline/PageSize - 1 pages targetable by DDP (newRecvLayout
// places them on page boundaries), then the rest (PageSize - rbHeaderLen
// bytes, not targetable), so that a placed message (the header segment
// and the pages) fits an inline-sized Send. It reports false when inline
// holds no DDP page (it is not a multiple of PageSize, or only one page):
// then nothing is announced.
func ourRBStruct(inline int) (RecvBufStruct, bool) {
	if inline%PageSize != 0 || inline < 2*PageSize {
		return RecvBufStruct{}, false
	}
	return RecvBufStruct{Length: uint32(inline), Groups: []RBGroup{
		{Count: 1, Seg: RBSeg{Length: rbHeaderLen, Align: rbHeaderLen}},
		{Count: uint32(inline/PageSize - 1), Seg: RBSeg{Length: PageSize, Align: PageSize, Flags: RBSegDDP}},
		{Count: 1, Seg: RBSeg{Length: PageSize - rbHeaderLen, Align: PageSize}},
	}}, true
}

// Append appends the XDR of b.
func (b *RecvBufStruct) Append(dst []byte) []byte {
	dst = be.AppendUint32(dst, b.Length)
	dst = be.AppendUint32(dst, uint32(len(b.Groups)))
	for _, g := range b.Groups {
		dst = be.AppendUint32(dst, g.Count)
		dst = be.AppendUint32(dst, g.Seg.Length)
		dst = be.AppendUint32(dst, g.Seg.Align)
		dst = be.AppendUint32(dst, g.Seg.Flags)
	}
	return dst
}

// DecodeRecvBufStruct decodes the value of PropRBStruct. Errors wrap
// ErrPropVal (RDMA2_ERR_BAD_PROPVAL): the value is not exactly one
// xmrbs_buf, holds more than MaxRBGroups groups, a group of no segment, a
// segment of no bytes or not a multiple of 4 bytes, an alignment that is
// not 0 or a power of 2, or xmrbuf_length that is not the sum of its
// segments (at most 1 GiB).
func DecodeRecvBufStruct(data []byte) (RecvBufStruct, error) {
	bad := func(format string, args ...any) (RecvBufStruct, error) {
		return RecvBufStruct{}, &HeaderError{Kind: ErrPropVal, Reason: "RDMA2_PROPID_RBSTRUCT: " + fmt.Sprintf(format, args...)}
	}
	var d xdr.Decoder
	d.Reset(data)
	if d.Remaining() < 8 {
		return bad("%d bytes", len(data))
	}
	b := RecvBufStruct{Length: d.Uint32()}
	n := d.Uint32()
	if n > MaxRBGroups || uint64(d.Remaining()) != 16*uint64(n) {
		return bad("%d groups in %d bytes", n, d.Remaining())
	}
	var sum uint64
	b.Groups = make([]RBGroup, n)
	for i := range b.Groups {
		g := RBGroup{Count: d.Uint32(), Seg: RBSeg{Length: d.Uint32(), Align: d.Uint32(), Flags: d.Uint32()}}
		if g.Count == 0 || g.Seg.Length == 0 || g.Seg.Length%4 != 0 || g.Seg.Align&(g.Seg.Align-1) != 0 {
			return bad("group %d: count %d, length %d, align %d", i, g.Count, g.Seg.Length, g.Seg.Align)
		}
		sum += uint64(g.Count) * uint64(g.Seg.Length)
		if sum > 1<<30 {
			return bad("more than 1 GiB")
		}
		b.Groups[i] = g
	}
	if sum != uint64(b.Length) {
		return bad("xmrbuf_length %d, segments of %d bytes", b.Length, sum)
	}
	return b, nil
}

// parseRBStruct returns the PropRBStruct among props (ok false when
// absent or empty: the default structure).
func parseRBStruct(props []Prop) (b RecvBufStruct, ok bool, err error) {
	for _, p := range props {
		if p.Which != PropRBStruct || len(p.Data) == 0 {
			continue
		}
		if b, err = DecodeRecvBufStruct(p.Data); err != nil {
			return RecvBufStruct{}, false, err
		}
		ok = true
	}
	return b, ok, nil
}

// ddpWindow is where a sender places a DDP-eligible item in a receive
// laid out as b: the first run of consecutive DDP-targetable segments,
// starting Start bytes into the buffer (first TBSN 0), Size bytes in
// all, Segs segments of SegLen bytes each. ok is false when b has no
// DDP-targetable segment (the sender then uses chunks).
type ddpWindow struct {
	Start, Size, SegLen, Segs int
}

func (b *RecvBufStruct) window() (w ddpWindow, ok bool) {
	off := 0
	for _, g := range b.Groups {
		l := int(g.Seg.Length)
		if g.Seg.Flags&RBSegDDP == 0 {
			if ok {
				break
			}
			off += int(g.Count) * l
			continue
		}
		if ok && l != w.SegLen {
			break
		}
		if !ok {
			w = ddpWindow{Start: off, SegLen: l}
			ok = true
		}
		w.Segs += int(g.Count)
		w.Size += int(g.Count) * l
		off += int(g.Count) * l
	}
	return w, ok
}

// SDDP is struct rpcrdma2_sddp of RDMA2_CALL_SDDP and RDMA2_REPLY_SDDP:
// the Payload stream's length and at most one placed item.
type SDDP struct {
	PSLen uint32 // rdma_pslen: Payload stream bytes right after the header
	Items int    // 0 or 1: whether the item below is present
	// The item (xmddp_mitem): at Disp bytes into the virtual XDR stream
	// (where it was excised: the Payload stream's offset), Length bytes
	// (without XDR pad), at Offset bytes into the DDP-targetable segment
	// TBSN[0], continuing through TBSN[1:].
	Disp, Length, Offset uint32
	TBSN                 []uint32
}

func (s *SDDP) len() int {
	n := 8
	if s.Items > 0 {
		n += 4*5 + 4*len(s.TBSN)
	}
	return n
}

func (s *SDDP) append(dst []byte) []byte {
	dst = be.AppendUint32(dst, s.PSLen)
	dst = be.AppendUint32(dst, uint32(s.Items))
	if s.Items > 0 {
		dst = be.AppendUint32(dst, s.Disp)
		dst = be.AppendUint32(dst, s.Length)
		dst = be.AppendUint32(dst, XMDTypeTBSN)
		dst = be.AppendUint32(dst, s.Offset)
		dst = be.AppendUint32(dst, uint32(len(s.TBSN)))
		for _, t := range s.TBSN {
			dst = be.AppendUint32(dst, t)
		}
	}
	return dst
}

// decode reads struct rpcrdma2_sddp at d's offset (off is that offset in
// the message, for errors). Errors: ErrShort, ErrChunk (RDMA2_ERR_BAD_XDR:
// more than one item, another xmddp_type than XMDTYPE_TBSN, no segment
// or more than MaxTBSN).
func (s *SDDP) decode(d *xdr.Decoder, off int) error {
	if d.Remaining() < 8 {
		return headerErr(ErrShort, off, "rpcrdma2_sddp without rdma_pslen and rdma_ddp")
	}
	s.PSLen = d.Uint32()
	items := d.Uint32()
	if items > 1 {
		return headerErr(ErrChunk, off+4, "%d DDP items, at most 1", items)
	}
	s.Items, s.TBSN = int(items), s.TBSN[:0]
	if items == 0 {
		return nil
	}
	if d.Remaining() < 20 {
		return headerErr(ErrShort, off+8, "xmddp_mitem cut short")
	}
	s.Disp, s.Length = d.Uint32(), d.Uint32()
	if t := d.Uint32(); t != XMDTypeTBSN {
		return headerErr(ErrChunk, off+16, "xmddp_type %d, only XMDTYPE_TBSN is accepted", t)
	}
	s.Offset = d.Uint32()
	n := d.Uint32()
	if n == 0 || n > MaxTBSN {
		return headerErr(ErrChunk, off+24, "%d target buffer segments (1 to %d)", n, MaxTBSN)
	}
	if uint64(d.Remaining()) < 4*uint64(n) {
		return headerErr(ErrShort, off+28, "xmdl_bsnum cut short")
	}
	for range n {
		s.TBSN = append(s.TBSN, d.Uint32())
	}
	return nil
}

// XmitErrCode is optx_err (the rtrext draft's section 9.5).
type XmitErrCode uint32

// Transmit Error codes.
const (
	XmitErrBadHMT  XmitErrCode = 1 // OPTXERR_BADHMT
	XmitErrBadOMT  XmitErrCode = 2 // OPTXERR_BADOMT
	XmitErrBadCont XmitErrCode = 3 // OPTXERR_BADCONT
	XmitErrBadSeq  XmitErrCode = 4 // OPTXERR_BADSEQ
	XmitErrBadXID  XmitErrCode = 5 // OPTXERR_BADXID
	XmitErrBadOff  XmitErrCode = 6 // OPTXERR_BADOFF
	XmitErrBadTBSN XmitErrCode = 7 // OPTXERR_BADTBSN
	XmitErrBadPL   XmitErrCode = 8 // OPTXERR_BADPL
)

func (c XmitErrCode) String() string {
	if c >= XmitErrBadHMT && c <= XmitErrBadPL {
		return [...]string{"OPTXERR_BADHMT", "OPTXERR_BADOMT", "OPTXERR_BADCONT", "OPTXERR_BADSEQ", "OPTXERR_BADXID", "OPTXERR_BADOFF", "OPTXERR_BADTBSN", "OPTXERR_BADPL"}[c-1]
	}
	return fmt.Sprintf("optx_err(%d)", uint32(c))
}

// XmsID is xms_id: a transmission, by the XID of its RPC message, its
// direction (0 call, 1 reply) and its sequence number in its group.
type XmsID struct {
	XID, Dir, Seq uint32
}

// XmitErr is the body of RDMA2_XMTERR (the rtrext draft's section 9.5):
// the transmission in error (Bad), an earlier one that led to it (Lead,
// when HasLead), the code and its arguments: Expect and Current for
// BADHMT, BADOMT, BADSEQ, BADXID; Value, Min and Max for BADOFF,
// BADTBSN, BADPL; none for BADCONT.
type XmitErr struct {
	Bad             XmsID
	HasLead         bool
	Lead            XmsID
	Code            XmitErrCode
	Expect, Current uint32
	Value, Min, Max uint32
}

func (e *XmitErr) Error() string {
	switch e.Code {
	case XmitErrBadOff, XmitErrBadTBSN, XmitErrBadPL:
		return fmt.Sprintf("rpcrdma: transmit error %v: %d not in [%d, %d]", e.Code, e.Value, e.Min, e.Max)
	case XmitErrBadCont:
		return "rpcrdma: transmit error OPTXERR_BADCONT"
	}
	return fmt.Sprintf("rpcrdma: transmit error %v: expected %d, got %d", e.Code, e.Expect, e.Current)
}

// Unwrap makes a Transmit Error match ErrChunk: the call failed in its
// transport resources.
func (e *XmitErr) Unwrap() error { return ErrChunk }

func (e *XmitErr) armLen() int {
	switch e.Code {
	case XmitErrBadCont:
		return 0
	case XmitErrBadOff, XmitErrBadTBSN, XmitErrBadPL:
		return 12
	}
	return 8
}

func (e *XmitErr) len() int {
	n := 12 + 4 + 4 + e.armLen()
	if e.HasLead {
		n += 12
	}
	return n
}

func (e *XmitErr) append(dst []byte) []byte {
	id := func(dst []byte, x XmsID) []byte {
		dst = be.AppendUint32(dst, x.XID)
		dst = be.AppendUint32(dst, x.Dir)
		return be.AppendUint32(dst, x.Seq)
	}
	dst = id(dst, e.Bad)
	if e.HasLead {
		dst = be.AppendUint32(dst, 1)
		dst = id(dst, e.Lead)
	} else {
		dst = be.AppendUint32(dst, 0)
	}
	dst = be.AppendUint32(dst, uint32(e.Code))
	switch e.armLen() {
	case 8:
		dst = be.AppendUint32(dst, e.Expect)
		dst = be.AppendUint32(dst, e.Current)
	case 12:
		dst = be.AppendUint32(dst, e.Value)
		dst = be.AppendUint32(dst, e.Min)
		dst = be.AppendUint32(dst, e.Max)
	}
	return dst
}

// decode reads the body of RDMA2_XMTERR. Errors: ErrShort, ErrChunk (an
// optional-data discriminator other than 0 or 1, an xmsi_dir other than
// 0 or 1, an unknown optx_err).
func (e *XmitErr) decode(d *xdr.Decoder, off int) error {
	*e = XmitErr{}
	id := func(x *XmsID) error {
		if d.Remaining() < 12 {
			return headerErr(ErrShort, off+d.Offset(), "xms_id cut short")
		}
		x.XID, x.Dir, x.Seq = d.Uint32(), d.Uint32(), d.Uint32()
		if x.Dir > 1 {
			return headerErr(ErrChunk, off+d.Offset()-8, "xmsi_dir %d", x.Dir)
		}
		return nil
	}
	start := d.Offset()
	off -= start
	if err := id(&e.Bad); err != nil {
		return err
	}
	if d.Remaining() < 4 {
		return headerErr(ErrShort, off+d.Offset(), "optxe_lead missing")
	}
	switch disc := d.Uint32(); disc {
	case 0:
	case 1:
		e.HasLead = true
		if err := id(&e.Lead); err != nil {
			return err
		}
	default:
		return headerErr(ErrChunk, off+d.Offset()-4, "optional-data discriminator %d", disc)
	}
	if d.Remaining() < 4 {
		return headerErr(ErrShort, off+d.Offset(), "optxe_which missing")
	}
	e.Code = XmitErrCode(d.Uint32())
	if e.Code < XmitErrBadHMT || e.Code > XmitErrBadPL {
		return headerErr(ErrChunk, off+d.Offset()-4, "unknown optx_err %d", uint32(e.Code))
	}
	if d.Remaining() < e.armLen() {
		return headerErr(ErrShort, off+d.Offset(), "%v without its arguments", e.Code)
	}
	switch e.armLen() {
	case 8:
		e.Expect, e.Current = d.Uint32(), d.Uint32()
	case 12:
		e.Value, e.Min, e.Max = d.Uint32(), d.Uint32(), d.Uint32()
	}
	return nil
}
