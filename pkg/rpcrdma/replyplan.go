package rpcrdma

import "fmt"

// ReplyPlan is the responder's choice of how to return one reply within
// the chunks of the call, in bytes.
type ReplyPlan struct {
	// Proc is ProcMsg (the reduced Payload stream in the Send) or
	// ProcNoMsg (the Payload stream in the Reply chunk, only the transport
	// header in the Send).
	Proc Proc
	// Write tells whether the DDP-eligible result is pushed into the
	// call's first Write chunk; WriteLen is how many bytes: the item
	// without its XDR pad (RFC 8166 section 3.4.6.2, as Linux svcrdma).
	Write    bool
	WriteLen int
	// InlineLen is the RPC bytes in the Send after the header (ProcMsg).
	InlineLen int
	// ReplyLen is the bytes written into the Reply chunk (ProcNoMsg), XDR
	// pads included (section 3.5.3).
	ReplyLen int
	// HeaderLen is the reply's transport header: the echoed Write list and
	// Reply chunk of the call, an empty Read list.
	HeaderLen int
}

// noChunks stands for a nil call: a call without chunks. Never written.
var noChunks Header

// replyHeaderLen is the length of the header BuildReply makes for call.
func replyHeaderLen(call *Header) int {
	n := MinHeaderLen
	for _, w := range call.Writes {
		n += writeChunkHdr(len(w))
	}
	if call.hasReply() {
		n += replyChunkHdr(len(call.Reply))
	}
	return n
}

// planReply chooses how a responder returns reply (its actual sizes, with
// reply.DDP when its item is DDP-eligible) to the call whose header is
// call, when the requester can receive inline messages of up to inline
// bytes (its receive size, negotiateInline's send on our side). A nil call
// is a call without chunks. NFSv2/3
// replies have at most one DDP-eligible result (RFC 8267 section 4); it
// goes into the first Write chunk.
//
//   - A DDP-eligible result is pushed into the first Write chunk when the
//     call has one with at least one segment: the responder MUST use a
//     provided Write list (section 4.3.2). An empty Write chunk (0
//     segments) or no Write list means the result stays inline (section
//     4.3.2.3). A result larger than the Write chunk does not fit.
//   - The reduced reply (without the pushed result and its pad) is sent
//     inline as RDMA_MSG when header + reply fits inline, even if a Reply
//     chunk was provided (section 4.3.3 allows it; Linux svcrdma instead
//     always uses a provided Reply chunk).
//   - Otherwise it goes into the Reply chunk as RDMA_NOMSG (section 3.5.3),
//     if the call has one and it is large enough.
//
// When the reply does not fit (a result larger than the Write chunk, a
// reply larger than the Reply chunk, no Reply chunk for a reply larger
// than inline, or a header alone larger than inline) the error wraps
// ErrChunk: the responder answers RDMA_ERROR with ERR_CHUNK rather than
// overrun a chunk or the requester's receive buffer (RFC 8166 sections
// 3.4.6 and 4.5.3, RFC 8267 section 3). Bad sizes wrap ErrInvalid.
func planReply(reply Message, call *Header, inline int) (ReplyPlan, error) {
	if err := reply.check("reply"); err != nil {
		return ReplyPlan{}, err
	}
	if call == nil {
		call = &noChunks
	}
	p := ReplyPlan{HeaderLen: replyHeaderLen(call)}
	if p.HeaderLen > inline {
		return ReplyPlan{}, fmt.Errorf("%w: reply transport header of %d bytes exceeds the inline threshold %d", ErrChunk, p.HeaderLen, inline)
	}
	stream := reply.Len()
	if reply.DDP && len(call.Writes) > 0 && len(call.Writes[0]) > 0 {
		if have := chunkLen(call.Writes[0]); uint64(reply.Payload) > have {
			return ReplyPlan{}, fmt.Errorf("%w: result of %d bytes exceeds the Write chunk of %d bytes (RFC 8166 section 3.4.6)", ErrChunk, reply.Payload, have)
		}
		p.Write, p.WriteLen = true, reply.Payload
		stream = reply.Head + reply.Tail
	}
	switch {
	case p.HeaderLen+stream <= inline:
		p.Proc, p.InlineLen = ProcMsg, stream
	case !call.hasReply():
		return ReplyPlan{}, fmt.Errorf("%w: reply of %d+%d bytes exceeds the inline threshold %d and the call has no Reply chunk (RFC 8267 section 3)", ErrChunk, p.HeaderLen, stream, inline)
	case uint64(stream) > chunkLen(call.Reply):
		return ReplyPlan{}, fmt.Errorf("%w: reply of %d bytes exceeds the Reply chunk of %d bytes (RFC 8166 section 4.5.3)", ErrChunk, stream, chunkLen(call.Reply))
	default:
		p.Proc, p.ReplyLen = ProcNoMsg, stream
	}
	return p, nil
}

// fillSegments appends to dst[:0] a copy of the requester's segments src
// with their lengths set to what n bytes written contiguously, in segment
// order, occupy (RFC 8166 section 3.4.6): full segments, one partial, then
// empty ones. Bytes beyond chunkLen(src) are not represented. It does not
// allocate when dst has room.
func fillSegments(dst, src []Segment, n uint64) []Segment {
	dst = dst[:0]
	for _, s := range src {
		l := uint64(s.Length)
		if l > n {
			l = n
		}
		n -= l
		s.Length = uint32(l)
		dst = append(dst, s)
	}
	return dst
}

// BuildReply fills h, reusing its slices, with the transport header of the
// reply to call planned by p (RFC 8166 sections 3.4.6, 4.3 and 4.5.3):
// call's XID, version 1, credits granted, p.Proc, an empty Read list
// (section 4.3.1), every Write chunk of the call echoed with its segment
// count and segments, the first holding p.WriteLen bytes when p.Write and
// the others returned unused (section 4.3.2.2), and the call's Reply chunk
// echoed holding p.ReplyLen bytes (zero when the reply went inline). h
// must not be call; a nil call is a call without chunks.
func (h *Header) BuildReply(call *Header, p ReplyPlan, credits uint32) {
	if call == nil {
		call = &noChunks
	}
	writes, reply := h.Writes[:0], h.Reply[:0]
	*h = Header{XID: call.XID, Vers: Version, Credits: credits, Proc: p.Proc, Reads: h.Reads[:0]}
	for i, w := range call.Writes {
		var slot []Segment
		if len(writes) < cap(writes) {
			slot = writes[:len(writes)+1][len(writes)]
		}
		var n uint64
		if i == 0 && p.Write {
			n = uint64(p.WriteLen)
		}
		writes = append(writes, fillSegments(slot, w, n))
	}
	h.Writes = writes
	h.Reply = reply
	if call.hasReply() {
		var n uint64
		if p.Proc == ProcNoMsg {
			n = uint64(p.ReplyLen)
		}
		h.Reply, h.HasReply = fillSegments(reply, call.Reply, n), true
	}
}

// CheckReply reports, wrapping ErrChunk, what makes the decoded RDMA_MSG or
// RDMA_NOMSG h unacceptable as the reply to call (the requester silently
// discards such a reply, RFC 8166 section 4.5, and the RPC times out or is
// retried):
//
//   - a Read list (responders MUST leave it empty, section 4.3.1);
//   - RDMA_NOMSG without a Reply chunk (section 4.2.4);
//   - more Write chunks than the call had; a Write chunk or Reply chunk
//     whose segment count or handles differ from the call's, or whose
//     segment lengths grow (the responder copies them and only sets the
//     lengths to what it wrote, sections 3.4.6 and 4.3.3);
//   - a Reply chunk the call did not provide.
//
// Other procedures return ErrInvalid: RDMA_ERROR completes the RPC with an
// error, RDMA_DONE is discarded (section 4.6.2).
func (h *Header) CheckReply(call *Header) error {
	switch h.Proc {
	case ProcMsg, ProcNoMsg:
	default:
		return fmt.Errorf("%w: %v is not a reply", ErrInvalid, h.Proc)
	}
	if call == nil {
		call = &noChunks
	}
	if len(h.Reads) != 0 {
		return fmt.Errorf("%w: reply with a Read list (RFC 8166 section 4.3.1)", ErrChunk)
	}
	if h.Proc == ProcNoMsg && !h.hasReply() {
		return fmt.Errorf("%w: RDMA_NOMSG reply without a Reply chunk", ErrChunk)
	}
	if len(h.Writes) > len(call.Writes) {
		return fmt.Errorf("%w: reply returns %d Write chunks, the call provided %d", ErrChunk, len(h.Writes), len(call.Writes))
	}
	for i, w := range h.Writes {
		if err := checkEcho(w, call.Writes[i]); err != nil {
			return fmt.Errorf("%w: Write chunk %d: %s", ErrChunk, i, err)
		}
	}
	if h.hasReply() {
		if !call.hasReply() {
			return fmt.Errorf("%w: reply returns a Reply chunk the call did not provide", ErrChunk)
		}
		if err := checkEcho(h.Reply, call.Reply); err != nil {
			return fmt.Errorf("%w: Reply chunk: %s", ErrChunk, err)
		}
	}
	return nil
}

// checkEcho compares a returned chunk with the one provided; it returns a
// reason, not an error chain.
func checkEcho(got, sent []Segment) error {
	if len(got) != len(sent) {
		return fmt.Errorf("%d segments returned, %d provided", len(got), len(sent))
	}
	for j := range got {
		if got[j].Handle != sent[j].Handle || got[j].Length > sent[j].Length {
			return fmt.Errorf("segment %d returned as handle %#x length %d, provided as handle %#x length %d",
				j, got[j].Handle, got[j].Length, sent[j].Handle, sent[j].Length)
		}
	}
	return nil
}
