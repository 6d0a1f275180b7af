package siw

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// rxState is the receive path's state, owned by the rx goroutine.
type rxState struct {
	r       fpduReader
	hdr     [2 + untaggedHdrLen]byte
	h       ddpHdr
	msn     [numQN]uint32 // next MSN expected per untagged queue
	sendMO  uint32        // bytes of the current Send placed so far
	readMO  uint32        // bytes of the current Read Response placed so far
	rtrWant bool          // the first FPDU must be the RTR
	// delivered: this FPDU produced a completion
	delivered bool
	// handlerDue: a receive completion was delivered to a CQ with a
	// handler, which rxLoop calls after rxFPDU (cq.pushRecv).
	handlerDue bool
	rreq       [readReqLen]byte
	scratch    [512]byte
}

// rxLoop runs the receive goroutine: it reads FPDUs until the connection
// ends or the peer violates the protocol.
func (q *qp) rxLoop() {
	x := &q.rx
	for i := range x.msn {
		x.msn[i] = 1
	}
	for {
		err := q.rxFPDU()
		handled := x.handlerDue
		if handled {
			// the receive CQ's handler runs here, with no lock held
			x.handlerDue = false
			q.rcq.runHandler()
		}
		if err == nil {
			// A completion was just delivered to a waiting consumer and
			// nothing more is buffered: let the woken consumer run
			// before this goroutine goes back to the socket (and parks
			// there), so the consumer's answer is not queued behind our
			// empty read.
			if x.delivered && !handled && x.r.src.buffered() == 0 {
				runtime.Gosched()
			}
			x.delivered = false
			continue
		}
		var te *TerminateError
		switch {
		case errors.As(err, &te) && !te.Remote:
			// a protocol violation: the transmit path sends the Terminate
			// and fails the QP; do not wait for it forever
			select {
			case <-q.done:
			case <-time.After(2 * time.Second):
				q.fail(err)
			}
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			q.fail(fmt.Errorf("%w: peer closed the connection", verbs.ErrDisconnect))
		case errors.Is(err, net.ErrClosed):
			q.fail(fmt.Errorf("%w: connection closed", verbs.ErrDisconnect))
		case errors.As(err, new(*net.OpError)):
			// the socket failed (reset, TCP_USER_TIMEOUT, keepalive): a
			// disconnect, as the transmit path reports a failed write
			q.fail(fmt.Errorf("%w: read: %w", verbs.ErrDisconnect, err))
		default:
			q.fail(err)
		}
		return
	}
}

// violation schedules a Terminate for the segment whose header is in
// q.rx.hdr and returns the error that stops the receive loop.
func (q *qp) violation(kind *TerminateError, detail string, args ...any) error {
	return q.terminate(newTerm(kind, detail, args...))
}

// terminate schedules a Terminate carrying te for the segment whose header
// is in q.rx.hdr and returns te.
func (q *qp) terminate(te *TerminateError) error {
	hl := 2 + q.rx.h.hdrLen()
	hdr := make([]byte, hl)
	copy(hdr, q.rx.hdr[:hl])
	q.sqMu.Lock()
	if q.term == nil {
		q.term = &termInfo{err: te, hdr: hdr}
	}
	q.sqMu.Unlock()
	q.wakeTx()
	return te
}

// rxFPDU reads and processes one FPDU.
func (q *qp) rxFPDU() error {
	x := &q.rx
	r := &x.r
	if q.State() == verbs.QPError {
		return net.ErrClosed
	}
	if err := r.begin(); err != nil {
		return q.markerErr(err)
	}
	if err := r.read(x.hdr[:4], true); err != nil {
		return q.markerErr(err)
	}
	ulpdu := int(binary.BigEndian.Uint16(x.hdr[0:]))
	h := &x.h
	h.ddpCtrl, h.rdmaCtrl = x.hdr[2], x.hdr[3]
	hl := h.hdrLen()
	if ulpdu < hl {
		h.ddpCtrl &^= ddpTagged // report only the bytes we have
		return q.violation(&TerminateError{Layer: LayerDDP, EType: ddpLocalCatastrophic}, "ULPDU length %d shorter than the DDP header (%d)", ulpdu, hl)
	}
	if err := r.read(x.hdr[4:2+hl], true); err != nil {
		return q.markerErr(err)
	}
	parseHdr(x.hdr[2:2+hl], h)
	payload := uint32(ulpdu - hl)

	if h.ddpCtrl&ddpVerMask != ddpVersion {
		if h.tagged() {
			return q.violation(ErrDDPVersion, "DDP version %d", h.ddpCtrl&ddpVerMask)
		}
		return q.violation(ErrUntaggedVersn, "DDP version %d", h.ddpCtrl&ddpVerMask)
	}
	if h.rdmaCtrl&rdmapVerMask != rdmapVersion {
		return q.violation(ErrRDMAPVersion, "RDMAP version %d", h.rdmaCtrl>>6)
	}
	if x.rtrWant {
		if err := q.rxRTR(payload); err != nil {
			return err
		}
	} else if h.tagged() {
		if err := q.rxTagged(payload); err != nil {
			return err
		}
	} else if err := q.rxUntagged(payload); err != nil {
		return err
	}
	// pad and CRC
	if err := r.end(ulpdu); err != nil {
		if ce, ok := err.(*crcError); ok {
			return q.violation(ErrCRC, "%v", ce)
		}
		return q.markerErr(err)
	}
	return nil
}

func (q *qp) markerErr(err error) error {
	if errors.Is(err, errMarker) {
		return q.violation(ErrMarker, "%v", err)
	}
	return err
}

// rxRTR checks the first FPDU of a peer-to-peer connection: it must be the
// negotiated zero-length RTR (RFC 6581 section 3).
func (q *qp) rxRTR(payload uint32) error {
	x := &q.rx
	h := &x.h
	switch {
	case !q.rtrRead && h.tagged() && h.opcode() == opRDMAWrite && payload == 0 && h.last():
	case q.rtrRead && !h.tagged() && h.opcode() == opReadRequest && h.qn == qnReadReq && payload == readReqLen:
		if err := q.rxUntagged(payload); err != nil {
			return err
		}
	default:
		return q.violation(ErrNoMatchingRTR, "first FPDU (opcode %d, %d bytes) is not the negotiated RTR", h.opcode(), payload)
	}
	x.rtrWant = false
	q.txReady.Store(true)
	close(q.rtrCh)
	q.wakeTx()
	return nil
}

// rxTagged places an RDMA Write or Read Response segment straight from the
// socket into the region its STag names, after checking the STag, the
// access rights and the bounds (RFC 5041 section 7.2, RFC 5040 section 6.4).
func (q *qp) rxTagged(n uint32) error {
	x := &q.rx
	h := &x.h
	switch h.opcode() {
	case opRDMAWrite:
		if n == 0 {
			return nil // a zero-length Write is not checked (RFC 5040 section 5.1)
		}
		// under placing, as every placement: once the QP failed (Close
		// returned), no byte lands in the consumer's memory, which it
		// may then reuse (a call retransmitted over another connection
		// into the same buffer)
		q.placing.Lock()
		defer q.placing.Unlock()
		if q.State() == verbs.QPError {
			return net.ErrClosed
		}
		dst, err := q.taggedTarget(h.stag, h.to, n, verbs.AccessRemoteWrite)
		if err != nil {
			return err
		}
		return q.markerErr(x.r.read(dst, true))
	case opReadResponse:
		q.placing.Lock()
		defer q.placing.Unlock()
		if q.State() == verbs.QPError {
			return net.ErrClosed // flushed: nothing more is placed
		}
		q.sqMu.Lock()
		if q.orqN == 0 {
			q.sqMu.Unlock()
			return q.violation(ErrUnexpectedOp, "Read Response with no RDMA Read outstanding")
		}
		idx := q.orq[q.orqHead]
		sink := verbs.SGE{}
		if len(q.sq[idx].wr.SGL) == 1 {
			sink = q.sq[idx].wr.SGL[0]
		}
		q.sqMu.Unlock()
		if uint64(x.readMO)+uint64(n) > uint64(sink.Length) {
			return q.violation(ErrTaggedBounds, "Read Response of %d+%d bytes for a Read of %d", x.readMO, n, sink.Length)
		}
		if n > 0 {
			if h.stag != sink.LKey || h.to != sink.Addr+uint64(x.readMO) {
				return q.violation(ErrTaggedSTag, "Read Response to STag 0x%08x TO 0x%x, expected 0x%08x TO 0x%x", h.stag, h.to, sink.LKey, sink.Addr+uint64(x.readMO))
			}
			dst, err := q.taggedTarget(h.stag, h.to, n, verbs.AccessLocalWrite)
			if err != nil {
				return err
			}
			if err := q.markerErr(x.r.read(dst, true)); err != nil {
				return err
			}
		}
		x.readMO += n
		if !h.last() {
			return nil
		}
		if x.readMO != sink.Length {
			return q.violation(ErrTaggedBounds, "Read Response of %d bytes for a Read of %d", x.readMO, sink.Length)
		}
		q.sqMu.Lock()
		q.orqHead = (q.orqHead + 1) % len(q.orq)
		q.orqN--
		q.finishSendLocked(idx, verbs.WCSuccess, nil, x.readMO)
		q.sqMu.Unlock()
		x.readMO = 0
		q.wakeTx() // an RDMA Read may have waited for ORD
		return nil
	}
	return q.violation(ErrUnexpectedOp, "opcode %d in a tagged segment", h.opcode())
}

// taggedTarget validates a tagged placement and returns the target bytes.
func (q *qp) taggedTarget(stag uint32, to uint64, n uint32, need verbs.Access) ([]byte, error) {
	dst, why := q.dev.resolve(stag, q.pd, to, n, need)
	switch why {
	case stagInvalid:
		return nil, q.violation(ErrTaggedSTag, "STag 0x%08x", stag)
	case stagOtherPD:
		return nil, q.violation(ErrSTagNotAssoc, "STag 0x%08x belongs to another protection domain", stag)
	case stagAccess:
		return nil, q.violation(ErrAccessRights, "STag 0x%08x lacks the access right", stag)
	case stagBounds:
		return nil, q.violation(ErrTaggedBounds, "%d bytes at TO 0x%x outside STag 0x%08x", n, to, stag)
	}
	return dst, nil
}

// rxUntagged handles Send (QN 0), Read Request (QN 1) and Terminate (QN 2).
func (q *qp) rxUntagged(n uint32) error {
	x := &q.rx
	h := &x.h
	op := h.opcode()
	wantQN := uint32(qnSend)
	switch op {
	case opSend, opSendInv, opSendSE, opSendSEInv:
	case opReadRequest:
		wantQN = qnReadReq
	case opTerminate:
		wantQN = qnTerminate
	default:
		return q.violation(ErrUnexpectedOp, "opcode %d in an untagged segment", op)
	}
	if h.qn != wantQN {
		return q.violation(ErrInvalidQN, "queue number %d for opcode %d", h.qn, op)
	}
	if h.msn != x.msn[wantQN] {
		return q.violation(ErrMSNRange, "MSN %d on queue %d, expected %d", h.msn, wantQN, x.msn[wantQN])
	}
	switch wantQN {
	case qnSend:
		return q.rxSend(n)
	case qnReadReq:
		return q.rxReadRequest(n)
	}
	return q.rxTerminate(n)
}

func (q *qp) rxSend(n uint32) error {
	x := &q.rx
	h := &x.h
	q.placing.Lock()
	defer q.placing.Unlock()
	if q.State() == verbs.QPError {
		return net.ErrClosed // flushed: nothing more is placed
	}
	if h.mo != x.sendMO {
		return q.violation(ErrInvalidMO, "MO %d, expected %d", h.mo, x.sendMO)
	}
	q.rqMu.Lock()
	if q.rqN == 0 {
		q.rqMu.Unlock()
		return q.violation(ErrNoRecvBuffer, "Send MSN %d", h.msn)
	}
	s := &q.rq[q.rqHead]
	q.rqMu.Unlock()
	if uint64(h.mo)+uint64(n) > uint64(s.total) {
		// complete the receive before the Terminate goes out: sending it
		// fails the QP, which flushes what is still posted
		te := newTerm(ErrMsgTooLong, "Send of at least %d bytes into a %d-byte receive", uint64(h.mo)+uint64(n), s.total)
		q.completeRecv(verbs.WC{ID: s.id, Status: verbs.WCLocLenErr, Opcode: verbs.WCRecv, Err: te})
		return q.terminate(te)
	}
	// place at MO across the receive's SGEs
	off := int(h.mo)
	rem := int(n)
	for _, b := range s.bufs {
		if rem == 0 {
			break
		}
		if off >= len(b) {
			off -= len(b)
			continue
		}
		k := min(len(b)-off, rem)
		if err := x.r.read(b[off:off+k], true); err != nil {
			return q.markerErr(err)
		}
		rem -= k
		off = 0
	}
	x.sendMO += n
	if !h.last() {
		return nil
	}
	wc := verbs.WC{ID: s.id, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: x.sendMO}
	if h.opcode() == opSendSE || h.opcode() == opSendSEInv {
		wc.Flags |= verbs.WCSolicitedEvent
	}
	if h.opcode() == opSendInv || h.opcode() == opSendSEInv {
		if !q.dev.invalidate(h.inv, q.pd) {
			err := q.violation(ErrCannotInval, "Send with Invalidate of STag 0x%08x", h.inv)
			return err
		}
		wc.Flags |= verbs.WCWithInv
		wc.InvalidatedKey = h.inv
	}
	x.sendMO = 0
	x.msn[qnSend]++
	q.completeRecv(wc)
	return nil
}

// completeRecv completes the receive at the head of the receive queue.
func (q *qp) completeRecv(wc verbs.WC) {
	wc.QPNum = q.num
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if q.rqN == 0 {
		return // flushed meanwhile
	}
	s := &q.rq[q.rqHead]
	for i := range s.bufs {
		s.bufs[i] = nil
	}
	q.rqHead = (q.rqHead + 1) % len(q.rq)
	q.rqN--
	ok, due := q.rcq.pushRecv(&wc)
	if !ok {
		go q.fail(fmt.Errorf("%w: receive CQ of QP %d", verbs.ErrCQOverrun, q.num))
	}
	q.rx.delivered = true
	q.rx.handlerDue = q.rx.handlerDue || due
}

// rxReadRequest queues an inbound RDMA Read for the transmit path; more
// than IRD outstanding is an error (RFC 5040 section 5.2).
func (q *qp) rxReadRequest(n uint32) error {
	x := &q.rx
	if n != readReqLen || !x.h.last() {
		return q.violation(&TerminateError{Layer: LayerRDMAP, EType: rdmapRemoteOperation, Code: rdmapUnspecified}, "Read Request of %d bytes", n)
	}
	if err := x.r.read(x.rreq[:], true); err != nil {
		return q.markerErr(err)
	}
	var ir inboundRead
	ir.req.parse(x.rreq[:])
	copy(ir.hdr[:], x.hdr[:])
	q.sqMu.Lock()
	if q.irqN >= len(q.irq) {
		q.sqMu.Unlock()
		return q.violation(ErrMSNRange, "more than IRD=%d RDMA Reads outstanding", len(q.irq))
	}
	q.irq[(q.irqHead+q.irqN)%len(q.irq)] = ir
	q.irqN++
	q.sqMu.Unlock()
	x.msn[qnReadReq]++
	q.wakeTx()
	return nil
}

// rxTerminate reads a Terminate from the peer and fails the QP with it.
func (q *qp) rxTerminate(n uint32) error {
	x := &q.rx
	k := min(int(n), len(x.scratch))
	if err := x.r.read(x.scratch[:k], true); err != nil {
		return err
	}
	te := &TerminateError{Layer: LayerRDMAP, EType: rdmapRemoteOperation, Code: rdmapUnspecified, Remote: true}
	if k >= termCtrlLen {
		t := parseTermCtrl(x.scratch[:termCtrlLen])
		te.Layer, te.EType, te.Code = t.layer, t.etype, t.code
	} else {
		te.Detail = fmt.Sprintf("Terminate of %d bytes without a control word", n)
	}
	// The oldest outstanding request is the one the peer refused (an RDMA
	// Read, or the Send/Write it could not place): it completes with the
	// remote error, the rest are flushed.
	status := verbs.WCRemOpErr
	if te.EType == rdmapRemoteProtection && te.Layer == LayerRDMAP || te.EType == ddpTaggedBuffer && te.Layer == LayerDDP {
		status = verbs.WCRemAccessErr
	}
	q.sqMu.Lock()
	for i := 0; i < q.sqN; i++ {
		sl := &q.sq[(q.sqHead+i)%len(q.sq)]
		if sl.state == slotSending {
			// the transmit path owns it until its write returns, and
			// completes it with this status (finishSendLocked)
			sl.termStatus, sl.termErr = status, te
			break
		}
		if sl.state != slotDone {
			sl.state, sl.status, sl.err = slotDone, status, te
			break
		}
	}
	q.deliverLocked()
	q.sqMu.Unlock()
	q.fail(te)
	return te
}
