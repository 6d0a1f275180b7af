package rpcrdma

import (
	"fmt"
	"math"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// The prefix and the chunk lists are encoded alike in both versions: the
// four words rdma_xid, rdma_vers, rdma_credit and rdma_proc (RFC 8166
// section 4.2) or rdma_htype (the draft's rpcrdma2_hdr_prefix, section
// 8.4), then, for the types that carry them, the Read list, the Write list
// and the Reply chunk (RFC 8166 section 4.3; the draft's
// rpcrdma2_read_list, rpcrdma2_write_list and rpcrdma2_write_chunk).

// readPrefix reads the four words every transport header starts with
// into h: XID, Vers and Credits as far as msg holds them, and returns the
// fourth (rdma_proc or rdma_htype). A msg shorter than the 16 bytes
// (FixedLen, PrefixLen) is ErrShort.
func (h *Header) readPrefix(msg []byte) (uint32, error) {
	if len(msg) < FixedLen {
		return 0, h.shortPrefix(msg)
	}
	p := (*[FixedLen]byte)(msg)
	h.XID, h.Vers, h.Credits = be.Uint32(p[0:]), be.Uint32(p[4:]), be.Uint32(p[8:])
	return be.Uint32(p[12:]), nil
}

// shortPrefix reads what a msg shorter than the prefix holds of it.
func (h *Header) shortPrefix(msg []byte) error {
	if len(msg) >= 4 {
		h.XID = be.Uint32(msg)
	}
	if len(msg) >= 8 {
		h.Vers = be.Uint32(msg[4:])
	}
	if len(msg) >= 12 {
		h.Credits = be.Uint32(msg[8:])
	}
	return headerErr(ErrShort, len(msg), "%d bytes, the header's four fixed words need %d", len(msg), FixedLen)
}

// listReader reads chunk lists from d, which starts right after the
// 16-byte prefix (error offsets are counted from the message's start),
// and counts the segments of the whole header against lim.
type listReader struct {
	d     xdr.Decoder
	lim   Limits
	total int // segments read so far, all lists together
	// v2: a list longer than lim is the draft's ErrSegments or
	// ErrWriteChunks with the limit in Max (section 7.3), checked after
	// a Read segment's own rules; in version 1 it is ErrChunk (RFC 8166
	// section 4.5.2), and the Read list's length is checked first.
	v2 bool
}

// off is the offset in the message of the next byte d reads.
func (r *listReader) off() int { return FixedLen + r.d.Offset() }

// tooMany is the error for a list longer than its limit: kind with max
// in version 2, ErrChunk in version 1.
func (r *listReader) tooMany(kind error, off int, max int, format string, args ...any) error {
	if !r.v2 {
		return headerErr(ErrChunk, off, format, args...)
	}
	return &HeaderError{Kind: kind, Offset: off, Reason: fmt.Sprintf(format, args...), Max: uint32(max)}
}

// present reads an optional-data discriminator (RFC 4506 section 4.19).
func (r *listReader) present() (bool, error) {
	off := r.off()
	if r.d.Remaining() < 4 {
		return false, headerErr(ErrShort, off, "missing list discriminator")
	}
	switch v := r.d.Uint32(); v {
	case 0:
		return false, nil
	case 1:
		return true, nil
	default:
		return false, headerErr(ErrChunk, off, "optional-data discriminator %d is not 0 or 1", v)
	}
}

// segmentAt decodes the plain segment (HLOO) at the start of b, which
// holds at least SegmentLen bytes.
func segmentAt(b []byte) Segment {
	return Segment{Handle: be.Uint32(b), Length: be.Uint32(b[4:]), Offset: be.Uint64(b[8:])}
}

// Which read positions a Read list may hold.
type positions int

const (
	anyPosition  positions = iota // version 1's Read list
	zeroPosition                  // version 2's Call chunk (rdma_call, section 6.3.5)
	dataPosition                  // version 2's rdma_reads: no position 0 (section 6.3.7)
)

// readList appends a Read list to h.Reads. Positions are multiples of 4
// (RFC 8166 section 3.4.5) that never decrease within the list (section
// 4.3.1.1), and follow the rule of want.
func (r *listReader) readList(h *Header, want positions) error {
	lim := &r.lim
	inChunk := 0
	first := len(h.Reads)
	for {
		off := r.off()
		more, err := r.present()
		if err != nil || !more {
			return err
		}
		if !r.v2 && (len(h.Reads) >= lim.MaxReadSegments || r.total >= lim.MaxSegments) {
			return headerErr(ErrChunk, off, "Read list longer than %d segments (header %d)", lim.MaxReadSegments, lim.MaxSegments)
		}
		if r.d.Remaining() < ReadSegmentLen-4 {
			return headerErr(ErrShort, off+4, "truncated read segment")
		}
		b := r.d.Fixed(ReadSegmentLen - 4)
		pos, seg := be.Uint32(b), segmentAt(b[4:])
		switch {
		case want == zeroPosition && pos != 0:
			return headerErr(ErrChunk, off+4, "Call chunk segment at position %d (the draft, section 6.6.3)", pos)
		case want == dataPosition && pos == 0:
			return headerErr(ErrChunk, off+4, "Position-zero Read segment in rdma_reads (the draft, section 6.3.7)")
		case pos%4 != 0:
			return headerErr(ErrChunk, off+4, "read position %d is not a multiple of 4 (RFC 8166 section 3.4.5)", pos)
		}
		n := len(h.Reads)
		switch {
		case n > first && pos == h.Reads[n-1].Position:
			inChunk++
		case n > first && pos < h.Reads[n-1].Position:
			return headerErr(ErrChunk, off+4, "read position %d after %d: Read list not in Payload stream order", pos, h.Reads[n-1].Position)
		default:
			inChunk = 1
		}
		if inChunk > lim.MaxChunkSegments || r.v2 && (n >= lim.MaxReadSegments || r.total >= lim.MaxSegments) {
			return r.tooMany(ErrSegments, off, lim.MaxChunkSegments, "Read chunk at position %d: more than %d segments in a chunk, %d in the Read list or %d in the header",
				pos, lim.MaxChunkSegments, lim.MaxReadSegments, lim.MaxSegments)
		}
		if segmentWraps(seg) {
			return headerErr(ErrChunk, off+8, "read segment offset %#x + length %d wraps", seg.Offset, seg.Length)
		}
		h.Reads = append(h.Reads, ReadSegment{Position: pos, Segment: seg})
		r.total++
	}
}

// writeList reads a Write list into h.Writes, reusing the segment slices
// h.Writes holds beyond its length.
func (r *listReader) writeList(h *Header) error {
	for {
		off := r.off()
		more, err := r.present()
		if err != nil || !more {
			return err
		}
		n := len(h.Writes)
		if n >= r.lim.MaxWriteChunks {
			return r.tooMany(ErrWriteChunks, off, r.lim.MaxWriteChunks, "Write list longer than %d chunks", r.lim.MaxWriteChunks)
		}
		var slot []Segment
		if n < cap(h.Writes) {
			slot = h.Writes[:n+1][n]
		}
		segs, err := r.segments(slot)
		if err != nil {
			return err
		}
		h.Writes = append(h.Writes, segs)
	}
}

// replyChunk reads the optional Reply chunk into h.Reply and h.HasReply.
func (r *listReader) replyChunk(h *Header) error {
	more, err := r.present()
	if err != nil || !more {
		return err
	}
	segs, err := r.segments(h.Reply)
	if err != nil {
		return err
	}
	h.Reply, h.HasReply = segs, true
	return nil
}

// segments reads a counted array of plain segments into dst[:0]. The
// count is checked against the limits and the bytes left before anything
// is allocated.
func (r *listReader) segments(dst []Segment) ([]Segment, error) {
	off := r.off()
	if r.d.Remaining() < 4 {
		return dst, headerErr(ErrShort, off, "missing segment count")
	}
	count := r.d.Uint32()
	if count > uint32(r.lim.MaxChunkSegments) || r.total+int(count) > r.lim.MaxSegments {
		return dst, r.tooMany(ErrSegments, off, r.lim.MaxChunkSegments, "chunk of %d segments (limits: %d per chunk, %d per header)", count, r.lim.MaxChunkSegments, r.lim.MaxSegments)
	}
	if uint64(count)*SegmentLen > uint64(r.d.Remaining()) {
		return dst, headerErr(ErrShort, off, "%d segments need %d bytes, %d left", count, uint64(count)*SegmentLen, r.d.Remaining())
	}
	dst = dst[:0]
	if cap(dst) < int(count) {
		dst = make([]Segment, 0, count)
	}
	b := r.d.Fixed(int(count) * SegmentLen)
	for i := 0; i < int(count); i++ {
		s := segmentAt(b[i*SegmentLen:])
		if segmentWraps(s) {
			return dst, headerErr(ErrChunk, off+4+i*SegmentLen, "segment offset %#x + length %d wraps", s.Offset, s.Length)
		}
		dst = append(dst, s)
	}
	r.total += int(count)
	return dst, nil
}

// segmentWraps reports whether a segment runs past the 64-bit address
// space: its last byte, Offset+Length-1, does not fit in 64 bits.
func segmentWraps(s Segment) bool {
	return s.Length > 0 && s.Offset > math.MaxUint64-uint64(s.Length-1)
}

// checkChunks reports why h's chunk lists must not be sent, or nil (an
// error wrapping ErrInvalid): a read position that is not a multiple of 4
// or that is smaller than the one before it (RFC 8166 section 3.4.5; the
// draft, section 4.5.1.1), or a segment whose Offset+Length wraps past
// 2^64.
func (h *Header) checkChunks() error {
	var prev uint32
	for i, r := range h.Reads {
		if r.Position%4 != 0 {
			return headerErr(ErrInvalid, 0, "read segment %d: position %d not a multiple of 4 (RFC 8166 section 3.4.5)", i, r.Position)
		}
		if r.Position < prev {
			return headerErr(ErrInvalid, 0, "read segment %d: position %d after %d", i, r.Position, prev)
		}
		prev = r.Position
		if segmentWraps(r.Segment) {
			return headerErr(ErrInvalid, 0, "read segment %d: offset+length wraps", i)
		}
	}
	for i, w := range h.Writes {
		for _, s := range w {
			if segmentWraps(s) {
				return headerErr(ErrInvalid, 0, "write chunk %d: offset+length wraps", i)
			}
		}
	}
	for _, s := range h.Reply {
		if segmentWraps(s) {
			return headerErr(ErrInvalid, 0, "reply chunk: offset+length wraps")
		}
	}
	return nil
}

// appendSegment appends a plain segment (HLOO: handle, length, offset).
func appendSegment(b []byte, s Segment) []byte {
	b = be.AppendUint32(b, s.Handle)
	b = be.AppendUint32(b, s.Length)
	return be.AppendUint64(b, s.Offset)
}

// appendSegments appends a counted array of plain segments (a Write or
// Reply chunk).
func appendSegments(b []byte, segs []Segment) []byte {
	b = be.AppendUint32(b, uint32(len(segs)))
	for _, s := range segs {
		b = appendSegment(b, s)
	}
	return b
}

// appendReadList appends the Read segments of reads at the positions
// want takes (all of them for version 1's Read list; position 0 for the
// draft's rdma_call, the others for its rdma_reads), each after a TRUE
// value_follows, and the FALSE that ends the list.
func appendReadList(dst []byte, reads []ReadSegment, want positions) []byte {
	for _, r := range reads {
		if want == anyPosition || (r.Position == 0) == (want == zeroPosition) {
			dst = be.AppendUint32(dst, 1)
			dst = be.AppendUint32(dst, r.Position)
			dst = appendSegment(dst, r.Segment)
		}
	}
	return be.AppendUint32(dst, 0)
}

// appendWriteList appends h's Write list: each chunk after a TRUE
// value_follows, then the FALSE that ends the list.
func (h *Header) appendWriteList(dst []byte) []byte {
	for _, w := range h.Writes {
		dst = be.AppendUint32(dst, 1)
		dst = appendSegments(dst, w)
	}
	return be.AppendUint32(dst, 0)
}

// appendReplyChunk appends h's optional Reply chunk: FALSE when it has
// none, else TRUE and the chunk.
func (h *Header) appendReplyChunk(dst []byte) []byte {
	if !h.hasReply() {
		return be.AppendUint32(dst, 0)
	}
	dst = be.AppendUint32(dst, 1)
	return appendSegments(dst, h.Reply)
}
