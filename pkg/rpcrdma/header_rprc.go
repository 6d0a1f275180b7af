package rpcrdma

import (
	"fmt"
)

// Responder-provided Read chunks (draft-cel-rpcrdma-responder-read-chunks,
// "the rprc draft") as an extension of RPC-over-RDMA version 2: its
// transport property, its two header types and their XDR, which the rprc
// draft leaves to the transport version (see the package doc's
// "Responder-provided Read chunks" section for the whole definition).
//
//	const RDMA2_PROPID_RPRC = 16;
//	typedef uint32 rpcrdma2_prop_rprc;      /* RDMA2_RPRC_* bits */
//	const RDMA2_RPRC_PULL   = 0x1;          /* as requester: pulls them */
//	const RDMA2_RPRC_EXPOSE = 0x2;          /* as responder: sends them */
//	const RDMA2_RPRC_REMINV = 0x4;          /* its Read chunks may be
//	                                           invalidated remotely */
//
//	const RDMA2_REPLY_READ = 16;
//	struct rpcrdma2_hdr_reply_read {
//	        uint32                      rdma_inv_handle;
//	        struct rpcrdma2_write_list  *rdma_writes;
//	        struct rpcrdma2_read_list   *rdma_reply_read; /* Position 0 */
//	};
//
//	const RDMA2_DONE = 17;
//	struct rpcrdma2_hdr_done {
//	        uint32                      rdma_handle;
//	};

// PropRPRC is RDMA2_PROPID_RPRC, the property announcing responder-provided
// Read chunks: a uint32 of RPRC* bits (default 0: not supported). Bits not
// defined here are zero when sent and ignored when received.
const PropRPRC PropID = 16

// Bits of the PropRPRC value.
const (
	// RPRCPull (RDMA2_RPRC_PULL): the sender, as requester, accepts
	// replies in responder-provided Read chunks, pulls them and sends
	// RDMA2_DONE.
	RPRCPull uint32 = 0x1
	// RPRCExpose (RDMA2_RPRC_EXPOSE): the sender, as responder, returns a
	// reply that does not fit the requester's reply resources in a
	// Read chunk.
	RPRCExpose uint32 = 0x2
	// RPRCRemoteInv (RDMA2_RPRC_REMINV): the sender accepts RDMA2_DONE by
	// Send With Invalidate of the R_key its RDMA2_REPLY_READ names in
	// rdma_inv_handle (the rprc draft's section 4.1.4).
	RPRCRemoteInv uint32 = 0x4
)

// Header types of the extension.
const (
	// HTypeReplyRead (RDMA2_REPLY_READ) conveys an RPC Reply whose Payload
	// stream is in a responder-provided Position-Zero Read chunk, the
	// version 2 form of the rprc draft's RDMA_NOMSG (section 4.1).
	HTypeReplyRead HType = 16
	// HTypeDone (RDMA2_DONE) is the pull completion notification for the
	// Read chunk of the reply rdma_xid (the rprc draft's section 4.1.3).
	HTypeDone HType = 17
)

// DoneLen is the length of an RDMA2_DONE: the prefix and rdma_handle.
const DoneLen = PrefixLen + 4

func (t HType) rprcString() string {
	if t == HTypeDone {
		return "RDMA2_DONE"
	}
	return "RDMA2_REPLY_READ"
}

// appendRPRCProp appends the PropRPRC property with flags, its value
// written into buf (which the Prop aliases).
func appendRPRCProp(dst []Prop, flags uint32, buf *[4]byte) []Prop {
	be.PutUint32(buf[:], flags)
	return append(dst, Prop{Which: PropRPRC, Data: buf[:]})
}

// parseRPRC returns the PropRPRC value among props (0 when absent or
// empty: the default). A value that is not one uint32 is an error wrapping
// ErrPropVal (the version 2 draft's section 5.1).
func parseRPRC(props []Prop) (uint32, error) {
	var flags uint32
	for i, p := range props {
		if p.Which != PropRPRC || len(p.Data) == 0 {
			continue
		}
		if len(p.Data) != 4 {
			return 0, &HeaderError{Kind: ErrPropVal, Reason: fmt.Sprintf("property %d (RDMA2_PROPID_RPRC): %d bytes, its uint32 needs 4", i, len(p.Data))}
		}
		flags = be.Uint32(p.Data)
	}
	return flags, nil
}

// decodeRPRC decodes the body of RDMA2_REPLY_READ (rdma_inv_handle, the
// Write list, a Position-Zero Read chunk of at least one segment: h.Reads)
// or RDMA2_DONE (rdma_handle: h.Handle). Errors as Decode2's: ErrShort,
// ErrChunk (a Read segment at a nonzero position, an empty Read chunk),
// ErrWriteChunks, ErrSegments.
func (h *Header) decodeRPRC(r *listReader) error {
	if r.d.Remaining() < 4 {
		return headerErr(ErrShort, PrefixLen, "%v without its first word", h.HType)
	}
	if h.HType == HTypeDone {
		h.Handle = r.d.Uint32()
		return nil
	}
	h.InvHandle = r.d.Uint32()
	if err := r.writeList(h); err != nil {
		return err
	}
	off := r.off()
	if err := r.readList(h, zeroPosition); err != nil {
		return err
	}
	if len(h.Reads) == 0 {
		return headerErr(ErrChunk, off, "RDMA2_REPLY_READ without a Read chunk")
	}
	return nil
}

// lenRPRC is the length of the body appendRPRC writes.
func (h *Header) lenRPRC() int {
	if h.HType == HTypeDone {
		return 4
	}
	n := 4 + 4 + 4 + ReadSegmentLen*len(h.Reads)
	for _, w := range h.Writes {
		n += 8 + SegmentLen*len(w)
	}
	return n
}

// checkRPRC reports why h, an RDMA2_REPLY_READ or RDMA2_DONE, must not be
// sent.
func (h *Header) checkRPRC() error {
	if h.HType == HTypeDone {
		return nil
	}
	if len(h.Reads) == 0 || h.hasReply() {
		return headerErr(ErrInvalid, 16, "RDMA2_REPLY_READ needs a Read chunk and has no Reply chunk")
	}
	for i, r := range h.Reads {
		if r.Position != 0 {
			return headerErr(ErrInvalid, 0, "read segment %d: position %d, not 0", i, r.Position)
		}
	}
	return h.checkChunks()
}

// appendRPRC appends the body of an RDMA2_REPLY_READ or RDMA2_DONE.
func (h *Header) appendRPRC(dst []byte) []byte {
	if h.HType == HTypeDone {
		return be.AppendUint32(dst, h.Handle)
	}
	dst = be.AppendUint32(dst, h.InvHandle)
	dst = h.appendWriteList(dst)
	return appendReadList(dst, h.Reads, zeroPosition)
}

// appendDone appends an RDMA2_DONE for the Read chunk of reply xid whose
// first segment is handle, with rdma_credit credits.
func appendDone(dst []byte, xid, credits, handle uint32) []byte {
	dst = be.AppendUint32(dst, xid)
	dst = be.AppendUint32(dst, Version2)
	dst = be.AppendUint32(dst, credits)
	dst = be.AppendUint32(dst, uint32(HTypeDone))
	return be.AppendUint32(dst, handle)
}

// checkReplyRead reports, wrapping ErrChunk, what makes the decoded
// RDMA2_REPLY_READ h unacceptable as the reply to call: more Write chunks
// than the call had, or a Write chunk that is not the call's echoed
// (checkEcho), or a Read chunk of more than max bytes.
func (h *Header) checkReplyRead(call *Header, max int) error {
	if len(h.Writes) > len(call.Writes) {
		return fmt.Errorf("%w: reply returns %d Write chunks, the call provided %d", ErrChunk, len(h.Writes), len(call.Writes))
	}
	for i, w := range h.Writes {
		if err := checkEcho(w, call.Writes[i]); err != nil {
			return fmt.Errorf("%w: Write chunk %d: %s", ErrChunk, i, err)
		}
	}
	if n := readChunkLen(h.Reads); n > uint64(max) {
		return fmt.Errorf("%w: responder-provided Read chunk of %d bytes, at most %d pulled", ErrChunk, n, max)
	}
	return nil
}
