package rpcrdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// The responder's side of version 2 (draft-ietf-nfsv4-rpcrdma-version-two):
// the connection's version, transport properties, and the dispatch of
// version 2 header types. Calls share serve, pull and reply with version 1.

// version returns c's version, deciding it from msg when it is the first
// message of a version served (the draft's section 4.3.3): 1, 2, or 0
// while undecided (a version 1-only server answers version 2 with
// ERR_VERS and waits for a version 1 message).
func (c *srvConn) version(msg []byte) uint32 {
	if v := c.vers.Load(); v != 0 || len(msg) < 8 {
		return v
	}
	mv := be.Uint32(msg[4:])
	if mv == Version || mv == Version2 && c.s.opts.MaxVersion >= Version2 {
		if c.vers.CompareAndSwap(0, mv) {
			c.s.opts.Logger.Info("rpcrdma: connection version", "peer", c.addr, "version", mv)
		}
	}
	return c.vers.Load()
}

// handle2 processes one message received on a version 2 connection.
func (sl *srvSlot) handle2(ctx context.Context, d sunrpc.Dispatcher, msg []byte) {
	c, s := sl.c, sl.c.s
	h := &sl.hdr
	if sl.contErr {
		sl.sendError(msg, fmt.Errorf("%w: message %d breaks the continuation in progress", ErrCont, sl.seq))
		return
	}
	if sl.xmtErr != nil && len(msg) >= PrefixLen {
		sl.sendError(msg, sl.xmtErr)
		return
	}
	hl, err := h.Decode2(msg, &s.opts.Limits)
	if err != nil {
		switch {
		case len(msg) < PrefixLen:
			// The XID cannot be trusted: silently discarded (section 7).
		case HType(be.Uint32(msg[12:])) == HTypeError:
			// Nobody answers an error with an error (section 7).
		default:
			if errors.Is(err, ErrVers) && be.Uint32(msg[4:]) == Version {
				err = fmt.Errorf("%w: %w", ErrVersMismatch, err) // section 7.1.2
			}
			sl.sendError(msg, err)
			return
		}
		s.opts.Logger.Debug("rpcrdma: message discarded", "peer", c.addr, "err", err)
		c.finish(sl.idx, nil, nil)
		return
	}
	c.cred.peerLimit.Store(h.Credits)
	if !c.withinCredit(sl.seq) {
		// Sent past our rdma_credit: as a version 1 requester sending
		// past its grant finds no receive, the connection ends.
		s.opts.Logger.Warn("rpcrdma: requester exceeded its credits", "peer", c.addr, "message", sl.seq)
		c.qp.Close()
		return
	}
	switch h.HType {
	case HTypeCallInline, HTypeCallExternal:
		sl.serve(ctx, d, msg, hl)
	case HTypeCallSDDP:
		if _, ok := s.opts.sddpLocal(); !ok {
			// Not announced: a header type this connection does not
			// support (the draft's section 6.1).
			sl.sendError(msg, headerErr(ErrHType, 12, "RDMA2_CALL_SDDP without RDMA2_PROPID_RBSTRUCT announced"))
			return
		}
		sl.serve(ctx, d, msg, hl)
	case HTypeCallSDDPMiddle:
		// groupPart holds those of a group; this one comes to a
		// responder that announced no structure.
		sl.sendError(msg, headerErr(ErrHType, 12, "RDMA2_CALL_SDDP_MIDDLE without RDMA2_PROPID_RBSTRUCT announced"))
	case HTypeConnPropMiddle, HTypeConnPropFinal:
		sl.connProp()
	case HTypeDone:
		sl.handleDone(sl.invKey)
	case HTypeGrant, HTypeError:
		// A requester's credit update: our replies answer calls the
		// requester has a receive for (one per call it keeps
		// outstanding), so none waits for it. An RDMA2_ERROR from a
		// requester answers nothing we sent: discarded.
		c.finish(sl.idx, nil, nil)
	case HTypeCallMiddle:
		// reassemble keeps those that continue a call; this one starts
		// a call larger than MaxCall.
		sl.sendError(msg, fmt.Errorf("%w: continued call larger than %d bytes", ErrCont, s.opts.MaxCall))
	default:
		// Replies: we send no reverse-direction calls (RDMA2_PROPID_BRS
		// none), so we support no reply header type.
		sl.sendError(msg, headerErr(ErrHType, 12, "%v on a connection without reverse-direction operation", h.HType))
	}
}

// withinCredit tells whether the seq-th message received stays within
// the rdma_credit we advertised: the requester may have sent at most
// posts-1 messages (the first one before any credit, section 4.3).
func (c *srvConn) withinCredit(seq uint32) bool {
	c.cred.mu.Lock()
	limit := max(c.cred.posts-1, 1)
	c.cred.mu.Unlock()
	return int32(seq-limit) <= 0
}

// connProp processes an RDMA2_CONNPROP_MIDDLE or _FINAL (the draft's
// sections 6.3.3 and 6.3.4): properties accumulate until the FINAL, which
// sets our send threshold to the requester's receive buffer size and is
// answered with our own RDMA2_CONNPROP_FINAL. A CONNPROP after the FINAL
// is RDMA2_ERR_INVAL_CONT; a bad known property RDMA2_ERR_BAD_PROPVAL,
// and none is applied.
func (sl *srvSlot) connProp() {
	c, s := sl.c, sl.c.s
	h := &sl.hdr
	msg := sl.msg
	c.propsMu.Lock()
	if c.propsDone {
		c.propsMu.Unlock()
		sl.sendError(msg, headerErr(ErrCont, 12, "%v after RDMA2_CONNPROP_FINAL (section 6.3.4)", h.HType))
		return
	}
	for _, p := range h.Props {
		c.peerProps = append(c.peerProps, Prop{Which: p.Which, Data: bytes.Clone(p.Data)})
	}
	if len(c.peerProps) > MaxProps {
		c.peerProps = nil
		c.propsMu.Unlock()
		sl.sendError(msg, headerErr(ErrChunk, 16, "more than %d properties", MaxProps))
		return
	}
	if h.HType == HTypeConnPropMiddle {
		c.propsMu.Unlock()
		c.finish(sl.idx, nil, nil)
		return
	}
	peer, err := ParseProperties(c.peerProps)
	var rprc uint32
	if err == nil {
		rprc, err = parseRPRC(c.peerProps)
	}
	var rbs RecvBufStruct
	var hasRBS bool
	if err == nil {
		rbs, hasRBS, err = parseRBStruct(c.peerProps)
	}
	if err == nil && hasRBS && rbs.Length > peer.RecvSize {
		err = &HeaderError{Kind: ErrPropVal, Reason: fmt.Sprintf("RDMA2_PROPID_RBSTRUCT of %d bytes, receive buffers of %d", rbs.Length, peer.RecvSize)}
	}
	c.peerProps = nil
	local := localProperties(s.opts.Inline, s.opts.Limits)
	var send int
	if err == nil {
		send, _, err = inline2(local, peer)
	}
	if err != nil {
		c.propsMu.Unlock()
		sl.sendError(msg, err)
		return
	}
	peer.HostAuth = nil
	c.props, c.propsDone = peer, true
	if _, ok := s.opts.sddpLocal(); ok && hasRBS {
		c.sddpWin, c.sddpOn = rbs.window()
		c.sddpLimit = min(send, int(rbs.Length), s.opts.Inline)
	}
	c.inline.Store(int64(send))
	c.propsMu.Unlock()
	c.setupRPRC(rprc)

	var pbuf [20]byte
	var rbuf [4]byte
	var props [8]Prop
	pl := local.AppendProps(props[:0], &pbuf)
	if f := s.opts.rprcLocal(); f != 0 {
		pl = appendRPRCProp(pl, f, &rbuf)
	}
	if rb, ok := s.opts.sddpLocal(); ok {
		pl = append(pl, Prop{Which: PropRBStruct, Data: rb.Append(nil)})
	}
	r := Header{XID: h.XID, Vers: Version2, Credits: 1, Header2: Header2{HType: HTypeConnPropFinal, Props: pl}}
	in := s.opts.Inline
	b, err := r.Encode(c.sendMR.Bytes()[sl.idx*in:][:0:in])
	if err != nil {
		c.finish(sl.idx, nil, nil)
		return
	}
	sl.sendCtl(b)
}

// sendCtl Sends b, a control message in the slot's send buffer, with the
// connection's credit (finish), and waits for it to complete.
func (sl *srvSlot) sendCtl(b []byte) {
	c := sl.c
	sl.sge[0] = c.sendMR.SGE(sl.idx*c.s.opts.Inline, len(b))
	sl.wr = verbs.SendWR{ID: wrSend | uint64(sl.idx), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sl.sge[:1]}
	if c.finish(sl.idx, b, &sl.wr) {
		_ = c.wait(sl.sendDone)
	}
}

// error2 returns the RDMA2_ERROR body answering err (Errcode2Of): our
// version range for RDMA2_ERR_VERS, the limit exceeded for the chunk and
// segment errors, the need for the resource errors.
func (sl *srvSlot) error2(err error) Error2 {
	code, max := Errcode2Of(err)
	e := Error2{Code: code}
	switch code {
	case Err2Vers:
		e.VersLow, e.VersHigh = Version, uint32(sl.c.s.opts.MaxVersion)
	case Err2ReadChunks, Err2WriteChunks:
		e.MaxChunks = max
	case Err2Segments:
		e.MaxSegments = max
	case Err2WriteResource, Err2ReplyResource:
		var re *resourceError
		if errors.As(err, &re) {
			e = re.e
		}
	}
	return e
}

// resourceError is a reply that does not fit the chunks of its call, as
// RDMA2_ERR_WRITE_RESOURCE or RDMA2_ERR_REPLY_RESOURCE (the draft's
// sections 6.6.4, 7.3.4 and 7.3.5). It matches ErrChunk.
type resourceError struct {
	e     Error2
	cause error
}

func (e *resourceError) Error() string { return fmt.Sprintf("%v: %v", e.e.Code, e.cause) }
func (e *resourceError) Unwrap() error { return e.cause }

// resourceErr turns planReply's ErrChunk for reply rm to call into the
// version 2 error that says what is missing: the first Write chunk too
// short for the DDP-eligible result (RDMA2_ERR_WRITE_RESOURCE, chunk 1,
// the result's length), else the Reply chunk absent or too short for the
// reduced reply (RDMA2_ERR_REPLY_RESOURCE, its length).
func resourceErr(rm Message, call *Header, err error) error {
	if rm.DDP && len(call.Writes) > 0 && len(call.Writes[0]) > 0 {
		if uint64(rm.Payload) > chunkLen(call.Writes[0]) {
			return &resourceError{e: Error2{Code: Err2WriteResource, ChunkIndex: 1, LengthNeeded: uint32(rm.Payload)}, cause: err}
		}
		return &resourceError{e: Error2{Code: Err2ReplyResource, LengthNeeded: uint32(rm.Head + rm.Tail)}, cause: err}
	}
	return &resourceError{e: Error2{Code: Err2ReplyResource, LengthNeeded: uint32(rm.Len())}, cause: err}
}

// systemError is a call refused for a reason none of the other version 2
// codes names: RDMA2_ERR_SYSTEM (the draft's section 7.4.1). Its cause
// (ErrChunk) is the version 1 answer.
type systemError struct{ cause error }

func (e *systemError) Error() string { return e.cause.Error() }
func (e *systemError) Unwrap() error { return e.cause }
