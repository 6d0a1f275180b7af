package rpcrdma

import "errors"

// shouldAnswer reports whether a responder must answer a call that failed
// to decode with err by an RDMA_ERROR (appendErrorReply), rather than
// silently discard it (RFC 8166 section 4.5). It is false when:
//
//   - err is nil, or wraps neither ErrVers nor ErrChunk;
//   - msg is shorter than MinHeaderLen (28) bytes: its XID cannot be
//     trusted (section 4.5);
//   - msg is an RDMA_ERROR (rdma_proc 4, a value fixed for all versions):
//     a responder silently discards those (section 4.2.4), and nobody
//     answers an error with an error;
//   - msg is a version 1 RDMA_DONE (section 4.6.2).
//
// A requester never answers: it silently discards a reply whose header
// does not decode (section 4.5).
func shouldAnswer(msg []byte, err error) bool {
	if err == nil || len(msg) < MinHeaderLen {
		return false
	}
	vers, proc := be.Uint32(msg[4:]), Proc(be.Uint32(msg[12:]))
	switch {
	case proc == ProcError:
		return false
	case errors.Is(err, ErrVers):
		return true
	case vers == Version && proc == ProcDone:
		return false
	}
	return errors.Is(err, ErrChunk)
}

// appendErrorReply appends to dst the RDMA_ERROR that answers the message
// msg, whose header failed with err, and returns the extended slice (RFC
// 8166 section 4.5): rdma_xid and rdma_vers copied from msg (when msg has
// at least 4, respectively 8, bytes; otherwise 0 and 1), rdma_credit set
// to credits, rdma_proc RDMA_ERROR, and
//
//   - ERR_VERS with rdma_vers_low = rdma_vers_high = 1 when err wraps
//     ErrVers (section 4.5.1): 28 bytes;
//   - ERR_CHUNK otherwise (section 4.5.2): 20 bytes.
//
// Call shouldAnswer first. appendErrorReply does not allocate when dst has
// 28 bytes of spare capacity. A responder that decoded a call but cannot
// return its reply within the call's chunks (planReply fails) answers with
// appendErrorReply(dst, msg, ErrChunk, credits) too (section 4.5.3).
func appendErrorReply(dst, msg []byte, err error, credits uint32) []byte {
	var xid, vers uint32 = 0, Version
	if len(msg) >= 4 {
		xid = be.Uint32(msg)
	}
	if len(msg) >= 8 {
		vers = be.Uint32(msg[4:])
	}
	dst = be.AppendUint32(dst, xid)
	dst = be.AppendUint32(dst, vers)
	dst = be.AppendUint32(dst, credits)
	dst = be.AppendUint32(dst, uint32(ProcError))
	if errors.Is(err, ErrVers) {
		dst = be.AppendUint32(dst, uint32(ErrcodeVers))
		dst = be.AppendUint32(dst, Version)
		return be.AppendUint32(dst, Version)
	}
	return be.AppendUint32(dst, uint32(ErrcodeChunk))
}

// appendError2 appends an RDMA2_ERROR header (the draft, section 7):
// rdma_xid and rdma_vers as given (those of the message answered),
// rdma_credit credits, rdma_htype RDMA2_ERROR and e. It does not allocate
// when dst has Error2MaxLen bytes of spare capacity.
func appendError2(dst []byte, xid, vers, credits uint32, e Error2) []byte {
	h := Header{XID: xid, Vers: Version2, Credits: credits, Header2: Header2{HType: HTypeError, Err: e}}
	n := len(dst)
	dst, err := h.encode2(dst)
	if err != nil {
		return dst
	}
	be.PutUint32(dst[n+4:], vers)
	return dst
}
