package siw

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// Queue sizes when QPAttr leaves them zero.
const (
	defaultSQDepth = 128
	defaultRQDepth = 128
	defaultMaxSGE  = 4
	maxSGELimit    = 64
)

type slotState uint8

const (
	slotFree     slotState = iota
	slotQueued             // posted, not yet transmitted
	slotSending            // the transmit path is sending it; it completes it
	slotInFlight           // transmitted; an RDMA Read waiting for its response
	slotDone               // finished; its completion waits for older requests
)

// sendSlot is one send-queue entry. Its SGL storage is allocated once.
type sendSlot struct {
	wr      verbs.SendWR
	sgl     []verbs.SGE
	state   slotState
	status  verbs.WCStatus
	err     error
	byteLen uint32
	// termStatus and termErr: a Terminate refused this request while the
	// transmit path was still sending it; it completes with them.
	termStatus verbs.WCStatus
	termErr    error
}

// recvSlot is one receive-queue entry with its SGEs resolved to memory.
type recvSlot struct {
	id    uint64
	bufs  [][]byte
	total int
}

// inboundRead is an RDMA Read Request received from the peer, waiting for
// our transmit path to send the Read Response (IRD bounded).
type inboundRead struct {
	req readReq
	hdr [2 + untaggedHdrLen]byte // the request's MPA length + DDP/RDMAP header, for a Terminate
}

// termInfo is a Terminate to send: the error and the header of the DDP
// segment that caused it (RFC 5040 section 4.8).
type termInfo struct {
	err  *TerminateError
	hdr  []byte // MPA length + DDP/RDMAP header of the offending segment
	rreq []byte // its Read Request header, when the segment was one
}

// qp is a reliable-connected queue pair.
type qp struct {
	pd       *pd
	dev      *Device
	num      uint32
	scq, rcq *cq
	maxSGE   int

	stateMu  sync.Mutex    // serialises state changes, err, conn
	state    atomic.Uint32 // verbs.QPState; read without stateMu on the data paths
	err      error
	done     chan struct{}
	attached bool

	conn    *net.TCPConn
	crcOn   bool
	txMark  bool // we insert markers
	rxMark  bool // the peer inserts markers
	ulpdu   int  // largest ULPDU we send at first (txState.ulpdu: now)
	ird     int
	ord     int
	local   net.Addr
	remote  net.Addr
	txReady atomic.Bool   // the responder got the RTR (or none is due)
	rtrCh   chan struct{} // closed when the RTR arrived
	rtrRead bool          // the RTR we expect is a zero-length Read

	// send queue (sqMu)
	sqMu     sync.Mutex
	sq       []sendSlot
	sqHead   int   // oldest slot not yet completed
	sqTx     int   // next slot to transmit
	sqN      int   // slots in use
	sqQueued int   // slots posted but not yet transmitted: [sqTx, sqTx+sqQueued)
	orq      []int // slot indices of RDMA Reads in flight, FIFO
	orqHead  int
	orqN     int
	irq      []inboundRead
	irqHead  int
	irqN     int
	term     *termInfo

	// placing is held by the receive path while it places bytes into a
	// posted receive, an RDMA Read sink or the target of an RDMA Write;
	// setError takes it, so that no byte lands in a buffer after its
	// flush completion was delivered, nor in a Write's target once Close
	// returned.
	placing sync.Mutex

	// receive queue (rqMu)
	rqMu   sync.Mutex
	rq     []recvSlot
	rqHead int
	rqN    int

	// posted counts the send-queue work requests posted (push, txRelease).
	posted atomic.Uint64

	// transmit path (txMu)
	txMu   sync.Mutex
	txWake chan struct{}
	tx     txState

	// receive path: owned by the rx goroutine
	rx rxState
}

var (
	_ verbs.QP         = (*qp)(nil)
	_ verbs.SendQueuer = (*qp)(nil)
)

func newQP(p *pd, attr verbs.QPAttr) (*qp, error) {
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: send and receive CQs must be CQs of this provider", verbs.ErrInvalidWR)
	}
	if attr.MaxSendWR <= 0 {
		attr.MaxSendWR = defaultSQDepth
	}
	if attr.MaxRecvWR <= 0 {
		attr.MaxRecvWR = defaultRQDepth
	}
	if attr.MaxSGE <= 0 {
		attr.MaxSGE = defaultMaxSGE
	}
	if attr.MaxSGE > maxSGELimit {
		return nil, fmt.Errorf("%w: MaxSGE %d > %d", verbs.ErrInvalidWR, attr.MaxSGE, maxSGELimit)
	}
	q := &qp{
		pd: p, dev: p.dev, num: p.dev.nextQPN.Add(1), scq: scq, rcq: rcq, maxSGE: attr.MaxSGE,
		done:   make(chan struct{}),
		rtrCh:  make(chan struct{}),
		txWake: make(chan struct{}, 1),
		sq:     make([]sendSlot, attr.MaxSendWR),
		rq:     make([]recvSlot, attr.MaxRecvWR),
	}
	for i := range q.sq {
		q.sq[i].sgl = make([]verbs.SGE, 0, attr.MaxSGE)
	}
	for i := range q.rq {
		q.rq[i].bufs = make([][]byte, 0, attr.MaxSGE)
	}
	return q, nil
}

func (q *qp) Num() uint32 { return q.num }

func (q *qp) State() verbs.QPState { return verbs.QPState(q.state.Load()) }

func (q *qp) Done() <-chan struct{} { return q.done }

func (q *qp) Err() error {
	q.stateMu.Lock()
	defer q.stateMu.Unlock()
	return q.err
}

func (q *qp) LocalAddr() net.Addr  { return q.local }
func (q *qp) RemoteAddr() net.Addr { return q.remote }

// PostRecv resolves the SGEs (lkey, LOCAL_WRITE, bounds) and queues the
// buffer. Errors: ErrInvalidWR (too many SGEs), ErrInvalidKey, ErrQueueFull,
// ErrQPState (QP in error).
func (q *qp) PostRecv(wr *verbs.RecvWR) error {
	if len(wr.SGL) > q.maxSGE {
		return fmt.Errorf("%w: %d SGEs > max %d", verbs.ErrInvalidWR, len(wr.SGL), q.maxSGE)
	}
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if q.State() == verbs.QPError {
		return fmt.Errorf("%w: %s", verbs.ErrQPState, verbs.QPError)
	}
	if q.rqN == len(q.rq) {
		return verbs.ErrQueueFull
	}
	s := &q.rq[(q.rqHead+q.rqN)%len(q.rq)]
	s.id = wr.ID
	s.bufs = s.bufs[:0]
	s.total = 0
	for _, g := range wr.SGL {
		b, _, err := q.dev.resolveLocal(q.pd, g, verbs.AccessLocalWrite)
		if err != nil {
			for i := range s.bufs {
				s.bufs[i] = nil
			}
			return err
		}
		s.bufs = append(s.bufs, b)
		s.total += len(b)
	}
	q.rqN++
	return nil
}

// PostSend validates and queues wr. A small request posted to an idle send
// queue is transmitted in the caller's goroutine, and with it what other
// goroutines queued meanwhile (QueueSend, or PostSend finding it busy); the
// rest by the QP's transmit goroutine. Errors: ErrInvalidWR, ErrQueueFull,
// ErrQPState.
func (q *qp) PostSend(wr *verbs.SendWR) error { return q.post(wr, true) }

// QueueSend queues wr as PostSend does (the same checks and errors), to be
// transmitted by PushSends (verbs.SendQueuer).
func (q *qp) QueueSend(wr *verbs.SendWR) error { return q.post(wr, false) }

// PushSends transmits what the send queue holds, with one writev for the
// small Sends and RDMA Writes among it, in the caller's goroutine; or, when
// another goroutine is transmitting, leaves it to that one, which takes it
// when done (verbs.SendQueuer).
func (q *qp) PushSends() { q.push() }

// post validates and queues wr; with now, a small request to an idle
// send queue is transmitted before post returns, and any other is left to
// the transmit goroutine; without, nothing is transmitted (PushSends) but
// by a holder of txMu letting go of it (txRelease).
func (q *qp) post(wr *verbs.SendWR, now bool) error {
	if len(wr.SGL) > q.maxSGE {
		return fmt.Errorf("%w: %d SGEs > max %d", verbs.ErrInvalidWR, len(wr.SGL), q.maxSGE)
	}
	switch wr.Opcode {
	case verbs.WRSend, verbs.WRSendWithInv, verbs.WRRDMAWrite, verbs.WRLocalInv:
	case verbs.WRRDMARead:
		if len(wr.SGL) > 1 {
			return fmt.Errorf("%w: RDMA Read takes at most one SGE (one sink STag, RFC 5040 section 4.4)", verbs.ErrInvalidWR)
		}
	default:
		return fmt.Errorf("%w: opcode %d", verbs.ErrInvalidWR, wr.Opcode)
	}
	var total uint64
	for _, g := range wr.SGL {
		total += uint64(g.Length)
	}
	if total > 1<<31 {
		return fmt.Errorf("%w: message of %d bytes exceeds 2 GiB", verbs.ErrInvalidWR, total)
	}
	st := q.State()
	if st == verbs.QPError {
		return fmt.Errorf("%w: %s", verbs.ErrQPState, st)
	}
	if st == verbs.QPInit && wr.Opcode != verbs.WRLocalInv {
		return fmt.Errorf("%w: %s (not connected)", verbs.ErrQPState, st)
	}
	// Fast path: an idle queue and a small request go out from here.
	direct := now && total <= maxBatched && q.txReady.Load() && q.txMu.TryLock()
	var seen uint64
	if direct {
		seen = q.posted.Load()
	}
	q.sqMu.Lock()
	if q.sqN == len(q.sq) {
		q.sqMu.Unlock()
		if direct {
			q.txRelease(seen)
		}
		return verbs.ErrQueueFull
	}
	idx := (q.sqHead + q.sqN) % len(q.sq)
	s := &q.sq[idx]
	sgl := append(s.sgl[:0], wr.SGL...)
	s.wr = *wr
	s.wr.SGL = sgl
	s.sgl = sgl
	s.state = slotQueued
	s.status, s.err, s.byteLen = verbs.WCSuccess, nil, 0
	q.sqN++
	if direct && q.sqQueued == 0 && q.irqN == 0 && q.term == nil &&
		(wr.Opcode != verbs.WRRDMARead || q.orqN < q.ord) && wr.Flags&verbs.SendFence == 0 {
		q.sqTx = (q.sqTx + 1) % len(q.sq)
		s.state = slotSending
		q.sqMu.Unlock()
		q.execute(idx)
		q.txRelease(seen)
		return nil
	}
	q.sqQueued++
	q.posted.Add(1)
	q.sqMu.Unlock()
	if direct {
		// not idle: the transmit goroutine takes it, and whatever else
		// was queued
		q.txMu.Unlock()
	}
	if now {
		q.wakeTx()
	}
	return nil
}

func (q *qp) wakeTx() {
	select {
	case q.txWake <- struct{}{}:
	default:
	}
}

// finishSend records the outcome of slot idx and delivers, in posting
// order, every completion that is now due. Call with sqMu held.
func (q *qp) finishSendLocked(idx int, status verbs.WCStatus, err error, n uint32) {
	s := &q.sq[idx]
	if s.termErr != nil { // the peer's Terminate named it (rxTerminate)
		status, err, s.termErr = s.termStatus, s.termErr, nil
	}
	s.state, s.status, s.err, s.byteLen = slotDone, status, err, n
	q.deliverLocked()
}

func (q *qp) deliverLocked() {
	for q.sqN > 0 {
		s := &q.sq[q.sqHead]
		if s.state != slotDone {
			return
		}
		if s.wr.Flags&verbs.SendSignaled != 0 || s.status != verbs.WCSuccess {
			wc := verbs.WC{ID: s.wr.ID, Status: s.status, Opcode: wcOpcode(s.wr.Opcode), ByteLen: s.byteLen, QPNum: q.num, Err: s.err}
			if !q.scq.push(&wc) {
				go q.fail(fmt.Errorf("%w: send CQ of QP %d", verbs.ErrCQOverrun, q.num))
			}
		}
		s.state = slotFree
		s.err, s.termErr = nil, nil
		s.wr.SGL = nil
		q.sqHead = (q.sqHead + 1) % len(q.sq)
		q.sqN--
	}
}

func wcOpcode(o verbs.WROpcode) verbs.WCOpcode {
	switch o {
	case verbs.WRRDMAWrite:
		return verbs.WCRDMAWrite
	case verbs.WRRDMARead:
		return verbs.WCRDMARead
	case verbs.WRLocalInv:
		return verbs.WCLocalInv
	}
	return verbs.WCSend
}

// fail moves the QP to the error state with err (first error wins),
// flushes every outstanding work request and closes the connection.
func (q *qp) fail(err error) {
	if q.setError(err) {
		q.closeConn()
	}
}

// setError does what fail does but keeps the connection open, so that a
// Terminate can still be sent after the error is recorded. It reports
// whether this call moved the QP to the error state.
func (q *qp) setError(err error) bool {
	q.stateMu.Lock()
	if q.State() == verbs.QPError {
		q.stateMu.Unlock()
		return false
	}
	q.state.Store(uint32(verbs.QPError))
	q.err = err
	c := q.conn
	q.stateMu.Unlock()
	q.txReady.Store(false)

	// Stop the receive path's socket read (the socket stays writable for a
	// Terminate) and wait for a placement in progress to end: the buffers
	// flushed below must not be written afterwards.
	if c != nil {
		_ = c.SetReadDeadline(time.Unix(1, 0))
	}
	q.placing.Lock()
	defer q.placing.Unlock()

	q.sqMu.Lock()
	for i := 0; i < q.sqN; i++ {
		idx := (q.sqHead + i) % len(q.sq)
		// a slot being sent is completed by the transmit path when its
		// write returns
		if st := q.sq[idx].state; st != slotDone && st != slotSending {
			q.sq[idx].state, q.sq[idx].status = slotDone, verbs.WCFlushErr
			q.sq[idx].err = fmt.Errorf("%w: %w", verbs.ErrQPState, err)
		}
	}
	q.sqTx = (q.sqHead + q.sqN) % len(q.sq)
	q.sqQueued = 0
	q.orqN, q.irqN = 0, 0
	q.deliverLocked()
	q.sqMu.Unlock()

	q.rqMu.Lock()
	for ; q.rqN > 0; q.rqN-- {
		s := &q.rq[q.rqHead]
		wc := verbs.WC{ID: s.id, Status: verbs.WCFlushErr, Opcode: verbs.WCRecv, QPNum: q.num, Err: err}
		q.rcq.push(&wc)
		for i := range s.bufs {
			s.bufs[i] = nil
		}
		q.rqHead = (q.rqHead + 1) % len(q.rq)
	}
	q.rqMu.Unlock()
	// Done only now: whoever it wakes finds every work request flushed
	// and no placement under way
	close(q.done)
	q.wakeTx()
	return true
}

// closeConn closes the connection, if one is attached.
func (q *qp) closeConn() {
	q.stateMu.Lock()
	c := q.conn
	q.stateMu.Unlock()
	if c != nil {
		closeTCP(c)
	}
}

// closeConn closes the TCP connection without resetting it while the peer
// may still be reading what we sent last (a Terminate): FIN first, the
// socket itself a little later.
func closeTCP(c *net.TCPConn) {
	_ = c.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(closeLinger))
	time.AfterFunc(closeLinger, func() { _ = c.Close() })
}

// closeLinger is how long a failed connection stays half-open so that the
// peer can read our last FPDU (a Terminate) before the socket closes.
const closeLinger = time.Second

// Close disconnects and flushes, and returns once no byte is placed in
// the consumer's memory any more (a failure another goroutine began has
// ended its flush too). The peer sees the connection end.
func (q *qp) Close() error {
	q.fail(fmt.Errorf("%w: closed locally", verbs.ErrDisconnect))
	<-q.done
	return nil
}
