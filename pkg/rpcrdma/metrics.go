package rpcrdma

import (
	"fmt"
	"sync/atomic"
)

// Metrics are a transport endpoint's counters (a Client, or a Server over
// all its connections). Counters only grow; gauges (marked) go up and down.
type Metrics struct {
	Connections int64 // gauge: connections open
	// Version is a gauge: the RPC-over-RDMA version of the latest
	// connection (requester: as negotiated; 0 before any).
	Version int64
	// Version1Fallbacks: requester: connections on which the responder
	// answered version 2 with ERR_VERS and version 1 was used (the
	// draft's section 4.3.2).
	Version1Fallbacks uint64

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
	// Errors2 counts RDMA2_ERROR messages sent (responder) or received
	// (requester) by rdma_err (the draft's section 7); RDMA2_ERR_VERS
	// and ERR_VERS are both counted in ErrVers too.
	Errors2 map[Errcode2]uint64
	// Grants: RDMA2_GRANT messages sent (responder) or received
	// (requester).
	Grants uint64
	// Continued: messages in Continued format, as several Sends (the
	// draft's section 6.6.2): calls sent and replies received
	// (requester), calls received and replies sent (responder).
	Continued uint64
	// SendWithInvalidate: replies sent (responder) or received (requester)
	// with Send With Invalidate (RFC 8797 Remote Invalidation).
	SendWithInvalidate uint64

	// Responder-provided Read chunks (header_rprc.go). ReplyReadChunks: replies
	// sent (responder) or received and pulled (requester) as
	// RDMA2_REPLY_READ; ReplyReadBytes: their Payload stream bytes in the
	// Read chunk. PullDone: RDMA2_DONE notifications sent (requester) or
	// received for an exposed Read chunk (responder); PullDoneDropped:
	// responder: those naming none (dropped); ReadChunkTimeouts:
	// responder: Read chunks invalidated after
	// ServerOptions.ReadChunkTimeout without an RDMA2_DONE.
	ReplyReadChunks, ReplyReadBytes              uint64
	PullDone, PullDoneDropped, ReadChunkTimeouts uint64
	// Send-based DDP (header_sddp.go). SendDDPMsgs: calls and replies sent or
	// received with their DDP-eligible item placed by send-based DDP
	// (RDMA2_CALL_SDDP, RDMA2_REPLY_SDDP); SendDDPBytes: the item bytes
	// placed; XmitErrors:
	// RDMA2_XMTERR Transmit Errors sent (responder) or received
	// (requester).
	SendDDPMsgs, SendDDPBytes, XmitErrors uint64
	// SendDDPGroups: of SendDDPMsgs, those sent or received as a
	// transmission group of several Sends (sddpgroup.go).
	SendDDPGroups uint64
	// SendDDPKept: of the results received by send-based DDP, those
	// handed on in the receive buffers, not copied (Call.KeepPlaced).
	SendDDPKept uint64

	// Registrations is a gauge of per-call memory registrations (caller
	// memory registered for a chunk) alive now; 0 when no call is in flight.
	Registrations int64
	// RegisteredBytes is a gauge of all memory registered: send and
	// receive buffer pools and per-slot chunk buffers, and per-call
	// registrations.
	RegisteredBytes int64
}

type metrics struct {
	connections, version                                          atomic.Int64
	fallbacks                                                     atomic.Uint64
	calls, replies, retransmits, unmatched, badReplies            atomic.Uint64
	creditsGranted                                                atomic.Uint64
	creditsInUse                                                  atomic.Int64
	inlineMsgs, readChunks, posZero, writeChunks, replyChunks     atomic.Uint64
	inlineBytes, readChunkBytes, writeChunkBytes, replyChunkBytes atomic.Uint64
	errVers, errChunk, sendInv                                    atomic.Uint64
	errors2                                                       [len(errcodes2Index)]atomic.Uint64
	grants, continued                                             atomic.Uint64
	replyReads, replyReadBytes, dones, donesDropped               atomic.Uint64
	sddpMsgs, sddpBytes, xmitErrs                                 atomic.Uint64
	sddpGroups, sddpKept                                          atomic.Uint64
	readChunkTimeouts                                             atomic.Uint64
	registrations, registeredBytes                                atomic.Int64
}

func (m *metrics) snapshot() Metrics {
	return Metrics{
		Connections: m.connections.Load(), Version: m.version.Load(), Version1Fallbacks: m.fallbacks.Load(),
		Calls: m.calls.Load(), Replies: m.replies.Load(), Retransmits: m.retransmits.Load(),
		UnmatchedReplies: m.unmatched.Load(), BadReplies: m.badReplies.Load(),
		CreditsGranted: m.creditsGranted.Load(), CreditsInUse: m.creditsInUse.Load(),
		InlineMsgs: m.inlineMsgs.Load(), ReadChunks: m.readChunks.Load(), PositionZeroChunks: m.posZero.Load(),
		WriteChunks: m.writeChunks.Load(), ReplyChunks: m.replyChunks.Load(),
		InlineBytes: m.inlineBytes.Load(), ReadChunkBytes: m.readChunkBytes.Load(),
		WriteChunkBytes: m.writeChunkBytes.Load(), ReplyChunkBytes: m.replyChunkBytes.Load(),
		ErrVers: m.errVers.Load(), ErrChunk: m.errChunk.Load(), SendWithInvalidate: m.sendInv.Load(),
		Registrations: m.registrations.Load(), RegisteredBytes: m.registeredBytes.Load(),
		Errors2: m.errors2Snapshot(), Grants: m.grants.Load(), Continued: m.continued.Load(),
		ReplyReadChunks: m.replyReads.Load(), ReplyReadBytes: m.replyReadBytes.Load(),
		PullDone: m.dones.Load(), PullDoneDropped: m.donesDropped.Load(), ReadChunkTimeouts: m.readChunkTimeouts.Load(),
		SendDDPMsgs: m.sddpMsgs.Load(), SendDDPBytes: m.sddpBytes.Load(), XmitErrors: m.xmitErrs.Load(), SendDDPGroups: m.sddpGroups.Load(), SendDDPKept: m.sddpKept.Load(),
	}
}

// errcodes2Index maps each Errcode2 to its counter.
var errcodes2Index = [...]Errcode2{Err2Vers, Err2BadXDR, Err2BadPropVal, Err2InvalHType, Err2InvalCont, Err2ReadChunks,
	Err2WriteChunks, Err2Segments, Err2WriteResource, Err2ReplyResource, Err2VersMismatch, Err2System}

// countError2 counts an RDMA2_ERROR of code c.
func (m *metrics) countError2(c Errcode2) {
	for i, x := range errcodes2Index {
		if x == c {
			m.errors2[i].Add(1)
		}
	}
	if c == Err2Vers {
		m.errVers.Add(1)
	}
}

func (m *metrics) errors2Snapshot() map[Errcode2]uint64 {
	var out map[Errcode2]uint64
	for i := range m.errors2 {
		if n := m.errors2[i].Load(); n > 0 {
			if out == nil {
				out = map[Errcode2]uint64{}
			}
			out[errcodes2Index[i]] = n
		}
	}
	return out
}

// ErrorReply is an RDMA_ERROR received in reply to a call (RFC 8166
// section 4.5). It matches ErrVers (ERR_VERS) or ErrChunk (ERR_CHUNK) with
// errors.Is.
type ErrorReply struct {
	XID      uint32
	Code     Errcode
	VersLow  uint32 // ERR_VERS only
	VersHigh uint32 // ERR_VERS only

	// Vers is 2 for an RDMA2_ERROR (the draft, section 7); Code2 is its
	// rdma_err and Err2 its whole body; Code is then unused.
	Vers  uint32
	Code2 Errcode2
	Err2  Error2
}

func (e *ErrorReply) Error() string {
	if e.Vers == Version2 {
		switch e.Code2 {
		case Err2Vers:
			return fmt.Sprintf("rpcrdma: RDMA2_ERROR %v (versions %d..%d) for XID %#x", e.Code2, e.Err2.VersLow, e.Err2.VersHigh, e.XID)
		case Err2WriteResource:
			return fmt.Sprintf("rpcrdma: RDMA2_ERROR %v (Write chunk %d needs %d bytes) for XID %#x", e.Code2, e.Err2.ChunkIndex, e.Err2.LengthNeeded, e.XID)
		case Err2ReplyResource:
			return fmt.Sprintf("rpcrdma: RDMA2_ERROR %v (Reply chunk needs %d bytes) for XID %#x", e.Code2, e.Err2.LengthNeeded, e.XID)
		}
		return fmt.Sprintf("rpcrdma: RDMA2_ERROR %v for XID %#x", e.Code2, e.XID)
	}
	if e.Code == ErrcodeVers {
		return fmt.Sprintf("rpcrdma: RDMA_ERROR %v (versions %d..%d) for XID %#x", e.Code, e.VersLow, e.VersHigh, e.XID)
	}
	return fmt.Sprintf("rpcrdma: RDMA_ERROR %v for XID %#x", e.Code, e.XID)
}

// Is matches ErrVers for ERR_VERS and ErrChunk for ERR_CHUNK; for an
// RDMA2_ERROR, the sentinel Errcode2Of maps to its code (ErrChunk for
// RDMA2_ERR_BAD_XDR, RDMA2_ERR_WRITE_RESOURCE and RDMA2_ERR_REPLY_RESOURCE
// too, as version 1's ERR_CHUNK covers them; nothing for RDMA2_ERR_SYSTEM).
func (e *ErrorReply) Is(target error) bool {
	if e.Vers == Version2 {
		switch e.Code2 {
		case Err2Vers:
			return target == ErrVers
		case Err2BadXDR, Err2WriteResource, Err2ReplyResource:
			return target == ErrChunk
		case Err2BadPropVal:
			return target == ErrPropVal
		case Err2InvalHType:
			return target == ErrHType
		case Err2InvalCont:
			return target == ErrCont
		case Err2VersMismatch:
			return target == ErrVersMismatch
		case Err2ReadChunks:
			return target == ErrReadChunks || target == ErrChunk
		case Err2WriteChunks:
			return target == ErrWriteChunks || target == ErrChunk
		case Err2Segments:
			return target == ErrSegments || target == ErrChunk
		}
		return false
	}
	switch e.Code {
	case ErrcodeVers:
		return target == ErrVers
	case ErrcodeChunk:
		return target == ErrChunk
	}
	return false
}
