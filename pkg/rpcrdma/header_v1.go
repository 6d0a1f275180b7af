package rpcrdma

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Sizes of the transport header and its parts, in bytes (RFC 8166 sections
// 4.1.2 and 4.7).
const (
	// Version is the only rdma_vers this package speaks (RFC 8166 section 4.2.2).
	Version = 1

	// FixedLen is the four fixed words: rdma_xid, rdma_vers, rdma_credit,
	// rdma_proc (section 4.2). An RDMA_DONE header is only these.
	FixedLen = 16

	// MinHeaderLen is an RDMA_MSG or RDMA_NOMSG header with the Read list,
	// the Write list and the Reply chunk all absent: the fixed words and
	// three zero words (section 4.7). A shorter call is silently discarded
	// (section 4.5).
	MinHeaderLen = 28

	// ErrorChunkLen and ErrorVersLen are the RDMA_ERROR headers: the fixed
	// words and rdma_err, plus rdma_vers_low and rdma_vers_high for ERR_VERS.
	ErrorChunkLen = 20
	ErrorVersLen  = 28

	// SegmentLen is a plain segment on the wire: handle, length, offset
	// (section 4.7 "HLOO").
	SegmentLen = 16

	// ReadSegmentLen is a Read list entry on the wire: the "present"
	// discriminator, position and a plain segment (section 4.7 "1 PHLOO").
	ReadSegmentLen = 4 + 4 + SegmentLen
)

// creditOffset is where rdma_credit is in an encoded header: after
// rdma_xid and rdma_vers (RFC 8166 section 4.2).
const creditOffset = 8

var be = binary.BigEndian

// Proc is rdma_proc, the discriminator of the header body (RFC 8166 section 4.2.4).
type Proc uint32

// rdma_proc values (RFC 8166 section 4.2.4).
const (
	ProcMsg   Proc = 0 // RDMA_MSG: chunk lists, then the Payload stream
	ProcNoMsg Proc = 1 // RDMA_NOMSG: chunk lists; the Payload stream is in a chunk
	ProcMsgP  Proc = 2 // RDMA_MSGP: no longer supported (section 4.6.1)
	ProcDone  Proc = 3 // RDMA_DONE: no longer supported (section 4.6.2)
	ProcError Proc = 4 // RDMA_ERROR: rdma_err follows, no Payload stream
)

func (p Proc) String() string {
	switch p {
	case ProcMsg:
		return "RDMA_MSG"
	case ProcNoMsg:
		return "RDMA_NOMSG"
	case ProcMsgP:
		return "RDMA_MSGP"
	case ProcDone:
		return "RDMA_DONE"
	case ProcError:
		return "RDMA_ERROR"
	}
	return fmt.Sprintf("rdma_proc(%d)", uint32(p))
}

// Errcode is rdma_err, the error code of an RDMA_ERROR (RFC 8166 section 4.5).
type Errcode uint32

// rdma_err values (RFC 8166 section 4.1.2, enum rpc_rdma_errcode).
const (
	ErrcodeVers  Errcode = 1 // ERR_VERS: rdma_vers_low and rdma_vers_high follow
	ErrcodeChunk Errcode = 2 // ERR_CHUNK
)

func (c Errcode) String() string {
	switch c {
	case ErrcodeVers:
		return "ERR_VERS"
	case ErrcodeChunk:
		return "ERR_CHUNK"
	}
	return fmt.Sprintf("rdma_err(%d)", uint32(c))
}

// Segment is a plain RDMA segment (RFC 8166 section 3.4.3, xdr_rdma_segment):
// Length bytes of the peer's registered memory named by Handle (the STag or
// R_key) at Offset (its tagged offset or virtual address).
type Segment struct {
	Handle uint32
	Length uint32
	Offset uint64
}

// ReadSegment is an RDMA read segment (RFC 8166 section 3.4.5,
// xdr_read_chunk): a Segment and the Position, in bytes from the start of
// the unreduced Payload stream, where its Read chunk's data belongs.
// Consecutive read segments with the same Position form one Read chunk.
type ReadSegment struct {
	Position uint32
	Segment
}

// Header is an RPC-over-RDMA version 1 transport header (RFC 8166 section
// 4.1.2, struct rdma_msg), or, with Vers 2, a version 2 one (header_v2.go:
// its HType and fields in the embedded Header2).
//
// A Header is meant to be reused: Decode truncates its slices and refills
// them, allocating only when a message has more segments than any before
// it. Slices obtained from a Header (including the inner slices of Writes)
// are overwritten by the next Decode or BuildReply.
type Header struct {
	XID     uint32 // rdma_xid: the XID of the RPC message (section 4.2.1)
	Vers    uint32 // rdma_vers; Encode writes 1 when it is 0
	Credits uint32 // rdma_credit: credits requested (call) or granted (reply) (section 4.2.3)
	Proc    Proc   // rdma_proc

	// RDMA_MSG and RDMA_NOMSG (section 4.3).

	// Reads is the Read list in wire order. Positions never decrease;
	// use nextReadChunk to walk it chunk by chunk.
	Reads []ReadSegment
	// Writes is the Write list: one counted array of segments per Write
	// chunk. An empty inner slice is an empty Write chunk (section 3.4.6).
	Writes [][]Segment
	// HasReply tells whether the Reply chunk is present; Reply holds its
	// segments. Encode also writes a Reply chunk when Reply is not empty.
	HasReply bool
	Reply    []Segment

	// RDMA_ERROR (section 4.5).
	Errcode  Errcode
	VersLow  uint32 // ERR_VERS: lowest version the sender supports
	VersHigh uint32 // ERR_VERS: highest version the sender supports

	// Version 2 only (Vers 2, header_v2.go): rdma_htype and the fields of
	// the header types; Proc is then the version 1 procedure HType
	// stands for.
	Header2
}

// Reset clears h, keeping the capacity of its slices.
func (h *Header) Reset() {
	*h = Header{Reads: h.Reads[:0], Writes: h.Writes[:0], Reply: h.Reply[:0], Header2: Header2{Props: h.Props[:0], SDDP: SDDP{TBSN: h.SDDP.TBSN[:0]}}}
}

func (h *Header) hasReply() bool { return h.HasReply || len(h.Reply) > 0 }

// Limits bound what Decode accepts from a peer. They are checked before
// anything is appended, so a header declaring absurd counts costs nothing.
// A zero field takes its default.
type Limits struct {
	// MaxReadSegments bounds the Read list, all Read chunks together.
	// Default 64.
	MaxReadSegments int
	// MaxWriteChunks bounds the Write list. Default 16 (NFSv3 uses at most
	// one; RFC 8267 section 6.4 recommends one for NFSv4).
	MaxWriteChunks int
	// MaxChunkSegments bounds the segments of any one chunk: a Read chunk
	// (segments sharing a position), a Write chunk or the Reply chunk.
	// Default 64 (RFC 8267 section 6.4 asks servers to accept 16; Linux
	// xprtrdma sends at most RPCRDMA_MAX_HDR_SEGS = 16).
	MaxChunkSegments int
	// MaxSegments bounds the segments of the whole header, all lists
	// together. Default 128.
	MaxSegments int
}

// Default limits (see Limits).
const (
	DefaultMaxReadSegments  = 64
	DefaultMaxWriteChunks   = 16
	DefaultMaxChunkSegments = 64
	DefaultMaxSegments      = 128
)

func (l *Limits) orDefault() Limits {
	var r Limits
	if l != nil {
		r = *l
	}
	if r.MaxReadSegments <= 0 {
		r.MaxReadSegments = DefaultMaxReadSegments
	}
	if r.MaxWriteChunks <= 0 {
		r.MaxWriteChunks = DefaultMaxWriteChunks
	}
	if r.MaxChunkSegments <= 0 {
		r.MaxChunkSegments = DefaultMaxChunkSegments
	}
	if r.MaxSegments <= 0 {
		r.MaxSegments = DefaultMaxSegments
	}
	return r
}

// chunkLen returns the length in bytes of a chunk: the sum of its segment
// lengths (RFC 8166 section 3.4.4).
func chunkLen(segs []Segment) uint64 {
	var n uint64
	for _, s := range segs {
		n += uint64(s.Length)
	}
	return n
}

// readChunkLen returns the length in bytes of a Read chunk (as returned by
// nextReadChunk).
func readChunkLen(segs []ReadSegment) uint64 {
	var n uint64
	for _, s := range segs {
		n += uint64(s.Length)
	}
	return n
}

// nextReadChunk splits a Read list into its first Read chunk (the leading
// segments sharing one Position, RFC 8166 section 3.4.5) and the rest.
// Both are sub-slices of reads; chunk is empty only when reads is.
func nextReadChunk(reads []ReadSegment) (chunk, rest []ReadSegment) {
	if len(reads) == 0 {
		return nil, nil
	}
	i := 1
	for i < len(reads) && reads[i].Position == reads[0].Position {
		i++
	}
	return reads[:i:i], reads[i:]
}

// PositionZero returns the Position Zero Read chunk, which carries a Long
// Call's whole Payload stream (RFC 8166 section 3.5.3), or nil.
func (h *Header) PositionZero() []ReadSegment {
	if len(h.Reads) > 0 && h.Reads[0].Position == 0 {
		c, _ := nextReadChunk(h.Reads)
		return c
	}
	return nil
}

// Len returns the length in bytes of h's encoding.
func (h *Header) Len() int {
	if h.Vers == Version2 {
		return h.len2()
	}
	switch h.Proc {
	case ProcMsg, ProcNoMsg:
		n := MinHeaderLen + ReadSegmentLen*len(h.Reads)
		for _, w := range h.Writes {
			n += 8 + SegmentLen*len(w)
		}
		if h.hasReply() {
			n += 4 + SegmentLen*len(h.Reply)
		}
		return n
	case ProcError:
		if h.Errcode == ErrcodeVers {
			return ErrorVersLen
		}
		return ErrorChunkLen
	}
	return FixedLen
}

// check reports why h must not be sent, or nil.
func (h *Header) check() error {
	switch h.Proc {
	case ProcMsg, ProcNoMsg:
	case ProcError:
		if h.Errcode != ErrcodeVers && h.Errcode != ErrcodeChunk {
			return headerErr(ErrInvalid, 16, "unknown rdma_err %d", uint32(h.Errcode))
		}
		return nil
	case ProcMsgP, ProcDone:
		return headerErr(ErrInvalid, 12, "senders MUST NOT send %v (RFC 8166 section 4.6)", h.Proc)
	default:
		return headerErr(ErrInvalid, 12, "unknown rdma_proc %d", uint32(h.Proc))
	}
	if err := h.checkChunks(); err != nil {
		return err
	}
	if h.Proc == ProcNoMsg && len(h.PositionZero()) == 0 && !h.hasReply() {
		return headerErr(ErrInvalid, 12, "RDMA_NOMSG needs a Position Zero Read chunk or a Reply chunk to hold the Payload stream (RFC 8166 section 4.2.4)")
	}
	return nil
}

// Encode appends h's encoding (RFC 8166 section 4.1.2) to dst and returns
// the extended slice. It does not allocate when dst has Len() bytes of
// spare capacity. It refuses, with an error wrapping ErrInvalid, what a
// sender must not send: RDMA_MSGP and RDMA_DONE (section 4.6), unknown
// rdma_proc or rdma_err values, read positions that are not multiples of 4
// or that decrease (section 3.4.5), segments whose Offset+Length wraps past 2^64, and
// an RDMA_NOMSG with neither a Position Zero Read chunk nor a Reply chunk
// (section 4.2.4). Everything Encode writes, Decode accepts (with limits
// large enough).
//
// A Header with Vers 2 is encoded as version 2 (encode2, header_v2.go).
func (h *Header) Encode(dst []byte) ([]byte, error) {
	if h.Vers == Version2 {
		return h.encode2(dst)
	}
	if err := h.check(); err != nil {
		return dst, err
	}
	dst = slices.Grow(dst, h.Len())
	vers := h.Vers
	if vers == 0 {
		vers = Version
	}
	dst = be.AppendUint32(dst, h.XID)
	dst = be.AppendUint32(dst, vers)
	dst = be.AppendUint32(dst, h.Credits)
	dst = be.AppendUint32(dst, uint32(h.Proc))
	if h.Proc == ProcError {
		dst = be.AppendUint32(dst, uint32(h.Errcode))
		if h.Errcode == ErrcodeVers {
			dst = be.AppendUint32(dst, h.VersLow)
			dst = be.AppendUint32(dst, h.VersHigh)
		}
		return dst, nil
	}
	dst = appendReadList(dst, h.Reads, anyPosition)
	dst = h.appendWriteList(dst)
	return h.appendReplyChunk(dst), nil
}

// Decode reads a transport header from the start of msg into h, reusing
// h's slices, and returns the header's length in bytes: for RDMA_MSG the
// RPC message starts at msg[n:]. lim bounds the segment counts; nil means
// the defaults.
//
// On error n is 0 and h holds what was read so far: XID when msg has at
// least 4 bytes, Vers from 8, Credits from 12, Proc from 16 (what
// appendErrorReply needs). Errors wrap:
//
//   - ErrShort (and ErrChunk): msg ends inside the header.
//   - ErrVers: rdma_vers is not 1 (section 4.2.2); nothing after the fixed
//     words is read.
//   - ErrChunk: an XDR or chunk error (section 4.5.2): an rdma_proc other
//     than RDMA_MSG, RDMA_NOMSG, RDMA_DONE and RDMA_ERROR (RDMA_MSGP
//     included, section 4.6.1, refused as Linux svcrdma does); an
//     optional-data discriminator other than 0 or 1 (RFC 4506 section
//     4.19); a read position not a multiple of 4 (section 3.4.5) or smaller
//     than the previous one (segments of one Read chunk are consecutive,
//     and Read chunks are listed in Payload stream order, section 4.3.1.1);
//     a count above lim; a segment whose Offset+Length wraps past 2^64 past 2^64; an
//     RDMA_NOMSG with neither a Position Zero Read chunk nor a Reply chunk
//     (sections 4.2.4 and 4.5.2); an RDMA_ERROR with an unknown rdma_err
//     (which the receiver silently discards, section 4.5).
//
// Accepted, as RFC 8166 allows: empty segments (length 0) in any chunk
// (section 3.4.3), empty Write chunks (count 0, sections 3.4.6 and
// 4.3.2.3), unused Write chunks (all segments empty, section 4.3.2.2), a
// Reply chunk of zero segments, and RDMA_DONE, which decodes to its 16
// fixed bytes and which the caller silently discards (section 4.6.2).
// Bytes after an RDMA_NOMSG, RDMA_DONE or RDMA_ERROR header are ignored.
func (h *Header) Decode(msg []byte, lim *Limits) (n int, err error) {
	h.Reset()
	proc, err := h.readPrefix(msg)
	if err != nil {
		return 0, err
	}
	h.Proc = Proc(proc)
	if h.Vers != Version {
		return 0, headerErr(ErrVers, 4, "rdma_vers %d", h.Vers)
	}
	r := listReader{lim: lim.orDefault()}
	r.d.Reset(msg[FixedLen:])
	switch h.Proc {
	case ProcMsg, ProcNoMsg:
		err = h.decodeLists(&r)
	case ProcDone:
		return FixedLen, nil
	case ProcError:
		err = h.decodeError(&r.d)
	case ProcMsgP:
		err = headerErr(ErrChunk, 12, "RDMA_MSGP is not supported (RFC 8166 section 4.6.1)")
	default:
		err = headerErr(ErrChunk, 12, "unknown rdma_proc %d", uint32(h.Proc))
	}
	if err != nil {
		return 0, err
	}
	return r.off(), nil
}

func (h *Header) decodeError(d *xdr.Decoder) error {
	if d.Remaining() < 4 {
		return headerErr(ErrShort, FixedLen, "RDMA_ERROR without rdma_err")
	}
	h.Errcode = Errcode(d.Uint32())
	switch h.Errcode {
	case ErrcodeChunk:
	case ErrcodeVers:
		if d.Remaining() < 8 {
			return headerErr(ErrShort, FixedLen+4, "ERR_VERS without rdma_vers_low and rdma_vers_high")
		}
		h.VersLow = d.Uint32()
		h.VersHigh = d.Uint32()
	default:
		return headerErr(ErrChunk, FixedLen, "unknown rdma_err %d", uint32(h.Errcode))
	}
	return nil
}

// decodeLists reads the chunk lists of an RDMA_MSG or RDMA_NOMSG (RFC
// 8166 section 4.3).
func (h *Header) decodeLists(r *listReader) error {
	if err := r.readList(h, anyPosition); err != nil {
		return err
	}
	if err := r.writeList(h); err != nil {
		return err
	}
	if err := r.replyChunk(h); err != nil {
		return err
	}
	if h.Proc == ProcNoMsg && len(h.PositionZero()) == 0 && !h.HasReply {
		return headerErr(ErrChunk, 12, "RDMA_NOMSG with neither a Position Zero Read chunk nor a Reply chunk (RFC 8166 section 4.5.2)")
	}
	return nil
}

// CheckCall reports, wrapping ErrChunk, what makes a decoded RDMA_MSG or
// RDMA_NOMSG unacceptable as a call; a responder answers it with ERR_CHUNK
// (RFC 8166 section 4.5.2):
//
//   - RDMA_NOMSG without a Position Zero Read chunk: the Payload stream of
//     a Long Call is in that chunk (section 3.5.3);
//   - RDMA_MSG with a Position Zero Read chunk: position 0 is the RPC XID,
//     never a DDP-eligible item, and a Long Call is sent as RDMA_NOMSG
//     (sections 3.5.3 and 4.2.4).
//
// Other procedures are not calls: RDMA_DONE and RDMA_ERROR received by a
// responder are silently discarded (sections 4.2.4 and 4.6.2); CheckCall
// returns ErrInvalid for them.
func (h *Header) CheckCall() error {
	switch h.Proc {
	case ProcNoMsg:
		if len(h.PositionZero()) == 0 {
			return headerErr(ErrChunk, 12, "RDMA_NOMSG call without a Position Zero Read chunk (RFC 8166 section 3.5.3)")
		}
	case ProcMsg:
		if len(h.PositionZero()) != 0 {
			return headerErr(ErrChunk, 20, "RDMA_MSG call with a Position Zero Read chunk (RFC 8166 section 3.5.3)")
		}
	default:
		return headerErr(ErrInvalid, 12, "%v is not a call", h.Proc)
	}
	return nil
}

// CheckXID reports, wrapping ErrChunk, an RPC message that is shorter than
// its 4-byte XID or whose XID differs from rdma_xid (RFC 8166 sections
// 4.2.1 and 4.5.2: a responder answers ERR_CHUNK, a requester discards).
// rpc is msg[n:] after Decode for RDMA_MSG, or the Payload stream pulled
// from the Position Zero Read chunk or written into the Reply chunk for
// RDMA_NOMSG.
func (h *Header) CheckXID(rpc []byte) error {
	if len(rpc) < 4 {
		return headerErr(ErrChunk, 0, "RPC message of %d bytes has no XID", len(rpc))
	}
	if x := be.Uint32(rpc); x != h.XID {
		return headerErr(ErrChunk, 0, "RPC XID %#x differs from rdma_xid %#x", x, h.XID)
	}
	return nil
}
