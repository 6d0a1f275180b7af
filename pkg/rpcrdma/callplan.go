package rpcrdma

import (
	"fmt"
	"math"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// MaxMessageLen bounds every size given to the planners, in bytes: XDR
// positions and segment lengths are 32-bit, and no RPC message of an
// NFSv3 client comes near it.
const MaxMessageLen = math.MaxInt32

// DefaultMaxSegs is the number of segments per chunk the planners assume
// when Inline.MaxSegs is 0: Linux xprtrdma's RPCRDMA_MAX_HDR_SEGS, and what
// RFC 8267 section 6.4 asks servers to accept.
const DefaultMaxSegs = 16

// Message gives the sizes of an RPC message (a call, or the largest reply
// the requester expects) around its one DDP-eligible data item, in bytes.
// For a message without such an item, Head is the whole message and
// Payload and Tail are 0.
//
//	| Head ............................ | Payload | pad | Tail ... |
//	  RPC header, arguments or results,   item's    0-3   what follows
//	  the item's XDR length word          bytes            the item
//
// Head and Tail are multiples of 4 (XDR, RFC 4506 section 3). The pad is
// xdr.Pad(Payload) and belongs to no field: a reduced item takes its pad
// out of the Payload stream and the chunk carries none (RFC 8166 sections
// 3.4.4.4, 3.4.5.2 and 3.4.6.2); an item left in the stream keeps it.
type Message struct {
	Head    int
	Payload int
	Tail    int
	// DDP tells whether the item is DDP-eligible under the Upper-Layer
	// Binding (RFC 8267 section 4 for NFSv3: WRITE and SYMLINK arguments,
	// READ and READLINK results) and may be moved in a chunk. For a reply
	// it also means the caller has a registered result buffer of Payload
	// bytes for it.
	DDP bool
}

// Len returns the length of the unreduced message: Head + Payload + pad + Tail.
func (m Message) Len() int { return m.Head + xdr.RoundUp(m.Payload) + m.Tail }

// reducible tells whether the item is worth a chunk.
func (m Message) reducible() bool { return m.DDP && m.Payload > 0 }

func (m Message) check(what string) error {
	switch {
	case m.Head < 0 || m.Payload < 0 || m.Tail < 0:
		return fmt.Errorf("%w: %s: negative size %+v", ErrInvalid, what, m)
	case m.Head%4 != 0 || m.Tail%4 != 0:
		return fmt.Errorf("%w: %s: head %d and tail %d must be multiples of 4", ErrInvalid, what, m.Head, m.Tail)
	case int64(m.Head)+int64(m.Payload)+int64(m.Tail)+3 > MaxMessageLen:
		return fmt.Errorf("%w: %s: larger than %d bytes", ErrInvalid, what, MaxMessageLen)
	}
	return nil
}

// Inline holds a connection's inline thresholds (RFC 8166 section 3.3.2)
// and the chunk size of its memory registration, in bytes.
type Inline struct {
	// Send is the call inline threshold: the largest RDMA Send we may
	// post, transport header included; the smaller of our send size and
	// the peer's receive size (negotiateInline).
	Send int
	// Recv is the reply inline threshold: the largest reply, transport
	// header included, the peer may Send us; the smaller of our receive
	// buffer size and the peer's send size.
	Recv int
	// MaxSegs is the most segments the registration puts in one chunk;
	// it sizes the largest transport header. 0 means DefaultMaxSegs.
	MaxSegs int
	// Vers is the connection's RPC-over-RDMA version (0 means 1): a
	// version 2 call header is 8 bytes longer than version 1's (the
	// draft's rdma_inv_handle, and RDMA2_CALL_EXTERNAL's second Read
	// list).
	Vers int
}

// callHdrExtra is what a call header of in's version adds to version 1's.
func (in Inline) callHdrExtra() int {
	if in.Vers == Version2 {
		return 8
	}
	return 0
}

// inlineFor returns the Inline of a connection on which we sent local and
// the peer sent peer (absentPrivateData() if it sent none).
func inlineFor(local, peer PrivateData, maxSegs int) Inline {
	send, recv := negotiateInline(local, peer)
	return Inline{Send: send, Recv: recv, MaxSegs: maxSegs}
}

func (in Inline) segs() int {
	if in.MaxSegs <= 0 {
		return DefaultMaxSegs
	}
	return in.MaxSegs
}

// Transport header sizes, in bytes, for chunks of at most n segments
// (RFC 8166 section 4.7). A header with no chunks is MinHeaderLen.
func readChunkHdr(n int) int  { return ReadSegmentLen * n }   // 1 PHLOO per segment
func writeChunkHdr(n int) int { return 4 + 4 + SegmentLen*n } // 1 n HLOO...
func replyChunkHdr(n int) int { return 4 + SegmentLen*n }     // n HLOO... (its discriminator is in MinHeaderLen)

// maxCallHdr is the largest call header: a full Read list and a full Write
// chunk (a Reply chunk is 4 bytes smaller than a Write chunk).
func maxCallHdr(n int) int { return MinHeaderLen + readChunkHdr(n) + writeChunkHdr(n) }

// maxReplyHdr is the largest reply header the responder sends us: one
// echoed Write chunk, or one Reply chunk.
func maxReplyHdr(n int) int { return MinHeaderLen + writeChunkHdr(n) }

// CallKind is how a call's Payload stream travels.
type CallKind int

const (
	// CallInline: RDMA_MSG, the whole call in the Send (RFC 8166 section 3.5.1).
	CallInline CallKind = iota
	// CallReadChunk: RDMA_MSG, the DDP-eligible argument in a Read chunk
	// at its XDR position, the rest of the call in the Send (section 3.5.2).
	CallReadChunk
	// CallLong: RDMA_NOMSG, the whole call in a Position Zero Read chunk,
	// only the transport header in the Send (section 3.5.3).
	CallLong
)

func (k CallKind) String() string {
	switch k {
	case CallInline:
		return "inline"
	case CallReadChunk:
		return "read chunk"
	case CallLong:
		return "position-zero read chunk"
	}
	return fmt.Sprintf("CallKind(%d)", int(k))
}

// ReplyKind is how the requester asks for its reply to travel.
type ReplyKind int

const (
	// ReplyInline: no Write list, no Reply chunk; the responder Sends the
	// whole reply (RFC 8166 sections 3.5.1 and 4.3.2.3).
	ReplyInline ReplyKind = iota
	// ReplyWriteChunk: one Write chunk for the DDP-eligible result, the
	// rest of the reply inline (section 3.5.2).
	ReplyWriteChunk
	// ReplyLong: a Reply chunk for the whole reply (section 3.5.3).
	ReplyLong
)

func (k ReplyKind) String() string {
	switch k {
	case ReplyInline:
		return "inline"
	case ReplyWriteChunk:
		return "write chunk"
	case ReplyLong:
		return "reply chunk"
	}
	return fmt.Sprintf("ReplyKind(%d)", int(k))
}

// CallPlan is the requester's choice of chunks for one RPC, in bytes.
type CallPlan struct {
	Proc Proc     // ProcMsg, or ProcNoMsg for CallLong
	Call CallKind // how the call travels
	// InlineLen is the RPC bytes in the Send after the transport header:
	// call.Len() (CallInline), call.Head+call.Tail (CallReadChunk: the
	// item and its pad are gone), 0 (CallLong).
	InlineLen int
	// ReadPos and ReadLen describe the Read chunk to register: Position
	// call.Head and length call.Payload, no pad (CallReadChunk); Position
	// 0 and length call.Len(), pads included (CallLong).
	ReadPos uint32
	ReadLen int

	Reply ReplyKind // how the reply is to travel
	// WriteLen is the Write chunk to register (ReplyWriteChunk):
	// reply.Payload, no room for the pad (RFC 8166 section 3.4.6.2).
	WriteLen int
	// ReplyLen is the Reply chunk to register (ReplyLong): reply.Len(),
	// the largest reply's whole Payload stream.
	ReplyLen int
	// HeaderMax is the largest the transport header of this call can be,
	// with chunks of at most Inline.MaxSegs segments.
	HeaderMax int
}

// planCall chooses how to send a call and how to ask for its reply,
// following Linux xprtrdma's rpcrdma_marshal_req and RFC 8166 sections 3.5
// and 4.3. call holds the call's sizes; reply the largest reply expected
// (RFC 8267 section 3), with reply.DDP when a result buffer is registered
// for its DDP-eligible result. Transport header sizes are the largest the
// chosen chunks can take with in.MaxSegs segments each.
//
// The reply is chosen first (its chunks are in the call's header):
//
//  1. ReplyInline if MinHeaderLen + reply.Len() <= in.Recv: even a READ
//     whose data fits comes inline, as with Linux (rpcrdma_results_inline).
//  2. ReplyWriteChunk if reply.DDP, reply.Payload > 0 and the reduced reply
//     (reply.Head + reply.Tail) fits in.Recv behind a header echoing the
//     Write chunk (rpcrdma_nonpayload_inline).
//  3. ReplyLong otherwise, the Reply chunk sized for reply.Len() (RFC 8166
//     section 4.3.3: required whenever the largest reply may exceed the
//     reply inline threshold). As with Linux, a reply never gets both a
//     Write chunk and a Reply chunk.
//
// Then the call:
//
//  1. CallInline if header + call.Len() <= in.Send.
//  2. CallReadChunk if call.DDP, call.Payload > 0 and header (with a Read
//     chunk) + call.Head + call.Tail <= in.Send: RDMA_MSG, Read chunk at
//     position call.Head (RFC 8166 section 3.4.5, RFC 8267 section 4).
//  3. CallLong otherwise: RDMA_NOMSG with a Position Zero Read chunk (RFC
//     8166 section 3.5.3); a call too large even without its payload goes
//     here whole.
//
// Errors wrap ErrInvalid: negative or misaligned sizes, or thresholds too
// small to hold the largest header (then no plan can work).
func planCall(call, reply Message, in Inline) (CallPlan, error) {
	if err := call.check("call"); err != nil {
		return CallPlan{}, err
	}
	if err := reply.check("reply"); err != nil {
		return CallPlan{}, err
	}
	n := in.segs()
	if n > DefaultMaxChunkSegments {
		return CallPlan{}, fmt.Errorf("%w: MaxSegs %d above %d", ErrInvalid, n, DefaultMaxChunkSegments)
	}
	if in.Send < maxCallHdr(n)+in.callHdrExtra() || in.Recv < maxReplyHdr(n) {
		return CallPlan{}, fmt.Errorf("%w: inline thresholds send %d, recv %d too small for headers with %d-segment chunks (%d, %d bytes)",
			ErrInvalid, in.Send, in.Recv, n, maxCallHdr(n)+in.callHdrExtra(), maxReplyHdr(n))
	}

	var p CallPlan
	hdr := MinHeaderLen + in.callHdrExtra() // the call's header without a Read list
	switch {
	case MinHeaderLen+reply.Len() <= in.Recv:
		p.Reply = ReplyInline
	case reply.reducible() && MinHeaderLen+writeChunkHdr(n)+reply.Head+reply.Tail <= in.Recv:
		p.Reply, p.WriteLen = ReplyWriteChunk, reply.Payload
		hdr += writeChunkHdr(n)
	default:
		p.Reply, p.ReplyLen = ReplyLong, reply.Len()
		hdr += replyChunkHdr(n)
	}

	switch {
	case hdr+call.Len() <= in.Send:
		p.Proc, p.Call, p.InlineLen = ProcMsg, CallInline, call.Len()
	case call.reducible() && hdr+readChunkHdr(n)+call.Head+call.Tail <= in.Send:
		p.Proc, p.Call, p.InlineLen = ProcMsg, CallReadChunk, call.Head+call.Tail
		p.ReadPos, p.ReadLen = uint32(call.Head), call.Payload
		hdr += readChunkHdr(n)
	default:
		// hdr + readChunkHdr(n) <= maxCallHdr(n) <= in.Send, checked above.
		p.Proc, p.Call, p.InlineLen = ProcNoMsg, CallLong, 0
		p.ReadPos, p.ReadLen = 0, call.Len()
		hdr += readChunkHdr(n)
	}
	p.HeaderMax = hdr
	return p, nil
}
