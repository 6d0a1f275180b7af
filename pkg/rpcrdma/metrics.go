package rpcrdma

import (
	"fmt"
	"sync/atomic"
)

// Metrics are a transport endpoint's counters (a Client, or a Server over
// all its connections). Counters only grow; gauges (marked) go up and down.
type Metrics struct {
	Connections int64 // gauge: connections open

	Calls            uint64 // calls sent (requester) or received (responder)
	Replies          uint64 // replies received (requester) or sent (responder)
	Retransmits      uint64 // responder: calls whose XID was seen recently (a retransmission)
	UnmatchedReplies uint64 // requester: replies whose XID matched no call, dropped
	BadReplies       uint64 // requester: replies that failed to decode or CheckReply, dropped

	CreditsGranted uint64 // gauge: requester: the last grant (rdma_credit) received; responder: the grants of all connections added up
	CreditsInUse   int64  // gauge: calls holding a credit now

	// Chunks by kind (RFC 8166 section 3.4).
	InlineMsgs, ReadChunks, PositionZeroChunks, WriteChunks, ReplyChunks uint64
	// Bytes by kind: RPC bytes carried inline in Sends, pulled by RDMA Read,
	// pushed by RDMA Write into Write chunks and into Reply chunks.
	InlineBytes, ReadChunkBytes, WriteChunkBytes, ReplyChunkBytes uint64

	// RDMA_ERROR replies sent (responder) or received (requester),
	// ERR_VERS and ERR_CHUNK (RFC 8166 section 4.5).
	ErrVers, ErrChunk uint64
	// SendWithInvalidate: replies sent (responder) or received (requester)
	// with Send With Invalidate (RFC 8797 Remote Invalidation).
	SendWithInvalidate uint64

	// Registrations is a gauge of per-call memory registrations (caller
	// memory registered for a chunk) alive now; 0 when no call is in flight.
	Registrations int64
	// RegisteredBytes is a gauge of all memory registered: send and
	// receive buffer pools and per-slot chunk buffers, and per-call
	// registrations.
	RegisteredBytes int64
}

type metrics struct {
	connections                                                   atomic.Int64
	calls, replies, retransmits, unmatched, badReplies            atomic.Uint64
	creditsGranted                                                atomic.Uint64
	creditsInUse                                                  atomic.Int64
	inlineMsgs, readChunks, posZero, writeChunks, replyChunks     atomic.Uint64
	inlineBytes, readChunkBytes, writeChunkBytes, replyChunkBytes atomic.Uint64
	errVers, errChunk, sendInv                                    atomic.Uint64
	registrations, registeredBytes                                atomic.Int64
}

func (m *metrics) snapshot() Metrics {
	return Metrics{
		Connections: m.connections.Load(),
		Calls:       m.calls.Load(), Replies: m.replies.Load(), Retransmits: m.retransmits.Load(),
		UnmatchedReplies: m.unmatched.Load(), BadReplies: m.badReplies.Load(),
		CreditsGranted: m.creditsGranted.Load(), CreditsInUse: m.creditsInUse.Load(),
		InlineMsgs: m.inlineMsgs.Load(), ReadChunks: m.readChunks.Load(), PositionZeroChunks: m.posZero.Load(),
		WriteChunks: m.writeChunks.Load(), ReplyChunks: m.replyChunks.Load(),
		InlineBytes: m.inlineBytes.Load(), ReadChunkBytes: m.readChunkBytes.Load(),
		WriteChunkBytes: m.writeChunkBytes.Load(), ReplyChunkBytes: m.replyChunkBytes.Load(),
		ErrVers: m.errVers.Load(), ErrChunk: m.errChunk.Load(), SendWithInvalidate: m.sendInv.Load(),
		Registrations: m.registrations.Load(), RegisteredBytes: m.registeredBytes.Load(),
	}
}

// ErrorReply is an RDMA_ERROR received in reply to a call (RFC 8166
// section 4.5). It matches ErrVers (ERR_VERS) or ErrChunk (ERR_CHUNK) with
// errors.Is.
type ErrorReply struct {
	XID      uint32
	Code     Errcode
	VersLow  uint32 // ERR_VERS only
	VersHigh uint32 // ERR_VERS only
}

func (e *ErrorReply) Error() string {
	if e.Code == ErrcodeVers {
		return fmt.Sprintf("rpcrdma: RDMA_ERROR %v (versions %d..%d) for XID %#x", e.Code, e.VersLow, e.VersHigh, e.XID)
	}
	return fmt.Sprintf("rpcrdma: RDMA_ERROR %v for XID %#x", e.Code, e.XID)
}

// Is matches ErrVers for ERR_VERS and ErrChunk for ERR_CHUNK.
func (e *ErrorReply) Is(target error) bool {
	switch e.Code {
	case ErrcodeVers:
		return target == ErrVers
	case ErrcodeChunk:
		return target == ErrChunk
	}
	return false
}
