package siw

import (
	"fmt"
	"hash/crc32"
	"runtime/debug"
	"syscall"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// txState is the transmit path's scratch, sized once: no allocation per
// operation. Guarded by qp.txMu.
type txState struct {
	msn  [numQN]uint32 // last MSN sent per untagged queue (RFC 5041 section 5.1: the first is 1)
	fw   *fpduWriter   // MPA framing onto the socket
	segs [][]byte
	rr   [readReqLen]byte
	term [termCtrlLen + hdrSlot + readReqLen]byte
	ir   inboundRead // the inbound RDMA Read being answered

	// FPDU sizing (refreshULPDU): the largest ULPDU sent now, the socket
	// TCP_MAXSEG is read from (the receive path's, sockReader.rc), and
	// the bytes sent since it was last read.
	ulpdu    int
	rc       syscall.RawConn // nil: the ULPDU is fixed (Config.MaxULPDU)
	mss      int
	mssFn    func(fd uintptr) // reads TCP_MAXSEG into mss; made once, so a read allocates nothing
	sinceMSS int

	// Batching (txDrain): while batch is set, a small Send or RDMA Write
	// is framed into the writer without a write of its own, and its slot
	// waits in pend until the write that carries it (flush) completes it;
	// werr is the write error that failed the QP, if any.
	batch bool
	pend  []int
	werr  error
}

// maxBatched is the largest message (octets) txDrain gathers with others
// into one write; a larger one is written, with what was gathered before
// it, when it is framed.
const maxBatched = 16 << 10

// mssRecheck is how many bytes of multi-FPDU messages go out between two
// reads of the connection's MSS (refreshULPDU).
const mssRecheck = 256 << 10

// refreshULPDU sizes the FPDUs of the message about to go out, of total
// bytes, to the connection's MSS as TCP reports it now (TCP_MAXSEG, the
// MULPDU of RFC 5044 section 4.5), as Linux siw re-reads tcp_sock.mss_cache
// before every FPDU (siw_update_tcpseg). TCP bounds a new connection's MSS
// to half the largest window the peer has offered (on loopback 32741 bytes
// at first, 65483 once the windows have grown), so the size taken at
// connection setup is often not the path's. Only a message that spans
// FPDUs pays the getsockopt(2), at most once per mssRecheck bytes; a
// device with Config.MaxULPDU keeps that size. Called with txMu held.
func (q *qp) refreshULPDU(hl, total int) {
	if q.tx.rc == nil || total <= q.tx.ulpdu-hl {
		return
	}
	q.tx.sinceMSS += total
	if q.tx.sinceMSS < mssRecheck {
		return
	}
	q.tx.sinceMSS = 0
	q.readMSS()
}

// readMSS sets q.tx.ulpdu to the MULPDU of the connection's MSS as TCP
// reports it now (TCP_MAXSEG), keeping the size it had when the socket
// does not say. Called with txMu held, or by attach before the transmit
// goroutine starts.
func (q *qp) readMSS() {
	q.tx.mss = 0
	if err := q.tx.rc.Control(q.tx.mssFn); err == nil && q.tx.mss > 0 {
		q.tx.ulpdu = mulpdu(q.tx.mss, q.txMark)
	}
}

// txLoop runs the transmit goroutine until the QP fails.
func (q *qp) txLoop() {
	// Registered memory may be a file's mapping (verbs.Device.RegMR over
	// mapped pages): a page past the end of a file that shrank faults
	// (SIGBUS). That panics here instead (execute, sendReadResponse
	// recover it and fail the QP) rather than ending the process.
	debug.SetPanicOnFault(true)
	for {
		select {
		case <-q.txWake:
		case <-q.done:
			return
		}
		q.txMu.Lock()
		seen := q.posted.Load()
		q.txDrain()
		q.txRelease(seen)
	}
}

// txRelease unlocks txMu, taken when q.posted read seen, and transmits
// what was queued meanwhile by posters that found it held (push): they
// leave their work requests to the holder.
func (q *qp) txRelease(seen uint64) {
	q.txMu.Unlock()
	if q.posted.Load() != seen {
		q.push()
	}
}

// push transmits what the send queue holds (txDrain) in the calling
// goroutine, unless another holds txMu: that one transmits, when it lets
// go, what was posted while it held it (txRelease).
func (q *qp) push() {
	for q.txMu.TryLock() {
		seen := q.posted.Load()
		q.txDrain()
		q.txMu.Unlock()
		if q.posted.Load() == seen {
			return
		}
	}
}

// txDrain sends what is due, in this order: a pending Terminate, Read
// Responses for inbound RDMA Reads, then send-queue requests in posting
// order (an RDMA Read waits while ORD Reads are outstanding, RFC 5040
// section 5.2). Small Sends and RDMA Writes queued together go out in one
// writev (at most batchFPDUs FPDUs), and their completions come when that
// write returns. Called with txMu held.
func (q *qp) txDrain() {
	q.tx.batch = true
	q.txDrainQueue()
	q.tx.batch = false
	_ = q.flush()
}

func (q *qp) txDrainQueue() {
	for q.State() != verbs.QPError {
		q.sqMu.Lock()
		if t := q.term; t != nil {
			q.term = nil
			q.sqMu.Unlock()
			q.terminateAndClose(t)
			return
		}
		if !q.txReady.Load() {
			q.sqMu.Unlock()
			return
		}
		if q.irqN > 0 {
			q.tx.ir = q.irq[q.irqHead]
			q.irqHead = (q.irqHead + 1) % len(q.irq)
			q.irqN--
			q.sqMu.Unlock()
			if q.sendReadResponse(&q.tx.ir) != nil {
				return
			}
			continue
		}
		if q.sqQueued == 0 {
			q.sqMu.Unlock()
			return
		}
		s := &q.sq[q.sqTx]
		if s.wr.Opcode == verbs.WRRDMARead && q.ord > 0 && q.orqN >= q.ord ||
			s.wr.Flags&verbs.SendFence != 0 && q.orqN > 0 {
			q.sqMu.Unlock()
			return // a Read Response wakes us
		}
		idx := q.sqTx
		q.sqTx = (q.sqTx + 1) % len(q.sq)
		q.sqQueued--
		s.state = slotSending
		q.sqMu.Unlock()
		q.execute(idx)
	}
}

// execute transmits send-queue slot idx. Called with txMu held. A memory
// fault reading the slot's source (memoryFault) completes it with a local
// protection error and moves the QP to error.
func (q *qp) execute(idx int) {
	defer func() {
		if err := memoryFault(recover()); err != nil {
			clear(q.tx.segs)
			q.localError(idx, verbs.WCLocProtErr, err)
		}
	}()
	s := &q.sq[idx]
	wr := &s.wr
	switch wr.Opcode {
	case verbs.WRSend, verbs.WRSendWithInv, verbs.WRRDMAWrite:
		total, status, err := q.gather(wr.SGL)
		if err != nil {
			q.localError(idx, status, err)
			return
		}
		batched := q.tx.batch && total <= maxBatched
		switch wr.Opcode {
		case verbs.WRRDMAWrite:
			err = q.sendMessage(true, opRDMAWrite, wr.RKey, wr.RemoteAddr, 0, 0, 0, q.tx.segs, total, !batched)
		default:
			op := byte(opSend)
			var inv uint32
			if wr.Opcode == verbs.WRSendWithInv {
				op, inv = opSendInv, wr.InvalidateKey
			}
			if wr.Flags&verbs.SendSolicited != 0 {
				op += opSendSE - opSend // Send->Send with SE, Send w/ Inv->Send w/ SE and Inv
			}
			q.tx.msn[qnSend]++
			err = q.sendMessage(false, op, 0, 0, inv, qnSend, q.tx.msn[qnSend], q.tx.segs, total, !batched)
		}
		clear(q.tx.segs)
		if err == nil && batched {
			q.tx.pend = append(q.tx.pend, idx) // completed by the write that carries it
			if len(q.tx.pend) >= batchFPDUs {
				// a full batch: written and completed now, so that a
				// drain that keeps finding work frees its slots as it goes
				_ = q.flush()
			}
			return
		}
		q.sqMu.Lock()
		if err != nil {
			// the connection failed under it: the peer may or may not have it
			q.finishSendLocked(idx, verbs.WCFlushErr, err, 0)
		} else {
			q.finishSendLocked(idx, verbs.WCSuccess, nil, 0)
		}
		q.sqMu.Unlock()
	case verbs.WRRDMARead:
		if q.ord == 0 {
			q.sqMu.Lock()
			q.finishSendLocked(idx, verbs.WCLocQPOpErr, fmt.Errorf("%w: RDMA Read with ORD 0", verbs.ErrInvalidWR), 0)
			q.sqMu.Unlock()
			return
		}
		var sink verbs.SGE
		if len(wr.SGL) == 1 {
			sink = wr.SGL[0]
		}
		if sink.Length > 0 {
			if _, status, err := q.dev.resolveLocal(q.pd, sink, verbs.AccessLocalWrite); err != nil {
				q.localError(idx, status, err)
				return
			}
		}
		rr := readReq{sinkSTag: sink.LKey, sinkTO: sink.Addr, size: sink.Length, srcSTag: wr.RKey, srcTO: wr.RemoteAddr}
		rr.put(q.tx.rr[:])
		q.sqMu.Lock()
		if q.State() == verbs.QPError {
			q.finishSendLocked(idx, verbs.WCFlushErr, q.Err(), 0)
			q.sqMu.Unlock()
			return
		}
		s.state = slotInFlight
		q.orq[(q.orqHead+q.orqN)%len(q.orq)] = idx
		q.orqN++
		q.sqMu.Unlock()
		q.tx.msn[qnReadReq]++
		q.tx.segs = append(q.tx.segs[:0], q.tx.rr[:])
		_ = q.sendMessage(false, opReadRequest, 0, 0, 0, qnReadReq, q.tx.msn[qnReadReq], q.tx.segs, readReqLen, true)
		q.tx.segs[0] = nil
	case verbs.WRLocalInv:
		ok := q.dev.invalidate(wr.InvalidateKey, q.pd)
		q.sqMu.Lock()
		if !ok {
			q.finishSendLocked(idx, verbs.WCLocProtErr, fmt.Errorf("%w: local invalidate of STag 0x%08x", verbs.ErrInvalidKey, wr.InvalidateKey), 0)
		} else {
			q.finishSendLocked(idx, verbs.WCSuccess, nil, 0)
		}
		q.sqMu.Unlock()
	}
}

// localError completes slot idx with a local error and, as the verbs
// require for a local protection or length error, moves the QP to error.
func (q *qp) localError(idx int, status verbs.WCStatus, err error) {
	q.sqMu.Lock()
	q.finishSendLocked(idx, status, err, 0)
	q.sqMu.Unlock()
	q.fail(err)
}

// gather resolves an SGL into q.tx.segs and returns the total length.
func (q *qp) gather(sgl []verbs.SGE) (int, verbs.WCStatus, error) {
	q.tx.segs = q.tx.segs[:0]
	total := 0
	for _, g := range sgl {
		if g.Length == 0 {
			continue
		}
		b, status, err := q.dev.resolveLocal(q.pd, g, 0)
		if err != nil {
			return 0, status, err
		}
		q.tx.segs = append(q.tx.segs, b)
		total += len(b)
	}
	return total, verbs.WCSuccess, nil
}

// sendReadResponse answers an inbound RDMA Read from the source region
// (RFC 5040 section 4.5). An invalid source is a remote protection error:
// Terminate, QP to error. Called with txMu held.
func (q *qp) sendReadResponse(r *inboundRead) (err error) {
	defer func() {
		if ferr := memoryFault(recover()); ferr != nil {
			q.fail(ferr)
			err = ferr
		}
	}()
	rr := &r.req
	q.tx.segs = q.tx.segs[:0]
	if rr.size > 0 {
		b, why := q.dev.resolve(rr.srcSTag, q.pd, rr.srcTO, rr.size, verbs.AccessRemoteRead)
		var terr *TerminateError
		switch why {
		case stagInvalid:
			terr = newTerm(ErrInvalidSTag, "RDMA Read source STag 0x%08x", rr.srcSTag)
		case stagOtherPD:
			terr = newTerm(ErrSTagNotAssoc, "RDMA Read source STag 0x%08x", rr.srcSTag)
		case stagAccess:
			terr = newTerm(ErrAccessRights, "RDMA Read source STag 0x%08x has no remote read access", rr.srcSTag)
		case stagBounds:
			terr = newTerm(ErrBaseBounds, "RDMA Read of %d bytes at 0x%x outside source STag 0x%08x", rr.size, rr.srcTO, rr.srcSTag)
		}
		if terr != nil {
			var rq [readReqLen]byte
			rr.put(rq[:])
			q.terminateAndClose(&termInfo{err: terr, hdr: r.hdr[:], rreq: rq[:]})
			return terr
		}
		q.tx.segs = append(q.tx.segs, b)
	}
	err = q.sendMessage(true, opReadResponse, rr.sinkSTag, rr.sinkTO, 0, 0, 0, q.tx.segs, int(rr.size), true)
	clear(q.tx.segs)
	return err
}

func newTerm(kind *TerminateError, format string, args ...any) *TerminateError {
	return &TerminateError{Layer: kind.Layer, EType: kind.EType, Code: kind.Code, Detail: fmt.Sprintf(format, args...)}
}

// terminateAndClose records t's error as the QP's (so that the peer's
// reaction to the Terminate cannot be taken for the cause), sends the
// Terminate, then closes the connection. Called with txMu held.
func (q *qp) terminateAndClose(t *termInfo) {
	q.setError(t.err)
	_ = q.sendTerminate(t)
	q.closeConn()
}

// sendTerminate sends a Terminate message (RFC 5040 section 4.8) with the
// header of the offending segment. Called with txMu held.
func (q *qp) sendTerminate(t *termInfo) error {
	b := q.tx.term[:termCtrlLen]
	putTermCtrl(b, termCtrl{layer: t.err.Layer, etype: t.err.EType, code: t.err.Code,
		m: len(t.hdr) > 0, d: len(t.hdr) > 0, r: len(t.rreq) > 0})
	b = append(b, t.hdr...)
	b = append(b, t.rreq...)
	q.tx.msn[qnTerminate]++
	q.tx.segs = append(q.tx.segs[:0], b)
	err := q.sendMessage(false, opTerminate, 0, 0, 0, qnTerminate, q.tx.msn[qnTerminate], q.tx.segs, len(b), true)
	clear(q.tx.segs)
	return err
}

// sendRTR sends the peer-to-peer ready-to-receive message (RFC 6581
// section 3): a zero-length RDMA Write to STag 1, TO 0 (STag 1 as Linux
// siw: it must not be checked for a zero-length Write), or a zero-length
// RDMA Read, which goes through the send queue as an unsignaled Read so
// that its (empty) Read Response finds it outstanding.
func (q *qp) sendRTR(read bool) error {
	q.txMu.Lock()
	defer q.txMu.Unlock()
	if !read {
		return q.sendMessage(true, opRDMAWrite, 1, 0, 0, 0, 0, nil, 0, true)
	}
	q.sqMu.Lock()
	idx := q.sqHead // the send queue is empty before the connection is up
	s := &q.sq[idx]
	s.wr = verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: s.sgl[:0]}
	s.state = slotSending
	q.sqN++
	q.sqTx = (q.sqTx + 1) % len(q.sq)
	q.sqMu.Unlock()
	q.execute(idx)
	if err := q.Err(); err != nil {
		return err
	}
	return nil
}

// sendMessage segments one DDP message of total bytes gathered from segs
// into FPDUs of at most q.tx.ulpdu bytes (RFC 5041 section 5: MO advances per
// untagged segment, TO per tagged segment, L on the last) and writes them
// with writev in batches, the last when flush is set (else a later flush
// writes it, with the messages framed after it). Called with txMu held. A
// write error fails the QP.
func (q *qp) sendMessage(tagged bool, op byte, stag uint32, to uint64, inv, qn, msn uint32, segs [][]byte, total int, flush bool) error {
	hl := untaggedHdrLen
	if tagged {
		hl = taggedHdrLen
	}
	q.refreshULPDU(hl, total)
	w := q.tx.fw
	maxPay := q.tx.ulpdu - hl
	si, so := 0, 0
	off := 0
	for first := true; first || off < total; first = false {
		n := min(maxPay, total-off)
		last := off+n == total
		h := w.header(hl)
		if tagged {
			putTagged(h, hl+n, last, op, stag, to+uint64(off))
		} else {
			putUntagged(h, hl+n, last, op, inv, qn, msn, uint32(off))
		}
		w.begin(h)
		for rem := n; rem > 0; {
			s := segs[si][so:]
			if len(s) > rem {
				s = s[:rem]
			}
			w.payload(s)
			rem -= len(s)
			so += len(s)
			if so == len(segs[si]) {
				si, so = si+1, 0
			}
		}
		off += n
		if err := w.end(); err != nil {
			return q.writeFailed(err)
		}
	}
	if !flush {
		return nil
	}
	return q.flush()
}

// flush writes the batched FPDUs and completes the work requests they
// carried (txDrain's batch): successful, or flushed when a write failed.
func (q *qp) flush() error {
	err := q.tx.fw.flush()
	if err != nil {
		err = q.writeFailed(err)
	}
	if len(q.tx.pend) > 0 {
		status := verbs.WCSuccess
		if q.tx.werr != nil {
			status = verbs.WCFlushErr // the connection failed under them: the peer may or may not have them
		}
		q.sqMu.Lock()
		for _, idx := range q.tx.pend {
			q.finishSendLocked(idx, status, q.tx.werr, 0)
		}
		q.sqMu.Unlock()
		clear(q.tx.pend)
		q.tx.pend = q.tx.pend[:0]
	}
	return err
}

// writeFailed fails the QP after a write error on the socket.
func (q *qp) writeFailed(err error) error {
	if q.tx.werr == nil {
		q.tx.werr = err
	}
	q.fail(fmt.Errorf("%w: write: %v", verbs.ErrDisconnect, err))
	return err
}

// memoryFault turns a recovered memory fault (debug.SetPanicOnFault: a
// registered page that is gone, such as a mapped file's page past its end)
// into an error wrapping verbs.ErrAccess; nil for nil; any other panic
// continues.
func memoryFault(r any) error {
	if r == nil {
		return nil
	}
	if f, ok := r.(interface{ Addr() uintptr }); ok {
		return fmt.Errorf("%w: memory fault at %#x reading a registered region (a mapped file shrank?)", verbs.ErrLocalError, f.Addr())
	}
	panic(r)
}
