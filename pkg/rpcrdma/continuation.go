package rpcrdma

// Message continuation (draft-ietf-nfsv4-rpcrdma-version-two section
// 6.6.2): on a version 2 connection a call too large for one Send is sent
// as RDMA2_CALL_MIDDLE Sends followed by one RDMA2_CALL_INLINE, each
// carrying the next part of the Payload stream, instead of a Call chunk
// the responder would pull with RDMA Reads. The responder reassembles the
// parts in the order they arrive (completion order), apart from its
// workers.

// MaxContinuation is the most Sends a requester spends on one continued
// call; a call that needs more goes in a Call chunk (Special format).
const MaxContinuation = 16

// contPlan sizes the continuation of a Payload stream of total bytes
// behind a final header of hl bytes, with Sends of at most send bytes:
// the number of Sends and what each middle carries (a multiple of 4).
func contPlan(total, hl, send int) (sends, mid int) {
	mid = (send - Middle2Len) &^ 3
	last := (send - hl) &^ 3
	if mid <= 0 || last < 0 {
		return 0, 0
	}
	if total <= last {
		return 1, mid
	}
	return 1 + (total-last+mid-1)/mid, mid
}
