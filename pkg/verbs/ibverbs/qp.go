//go:build ibverbs

package ibverbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// sendBit marks the wr_id of a send-queue work request; receive wr_ids
// have it clear. Completions in error carry only wr_id (ibv_poll_cq(3):
// the other fields are undefined), so the queue is told by this bit.
const sendBit = 1 << 63

// sendEntry is what the provider remembers of a posted send work request.
type sendEntry struct {
	id       uint64
	op       verbs.WCOpcode
	readLen  uint32
	signaled bool
	internal bool // posted by the provider (Bind MW, its Local Invalidate)
	what     string
}

// qp is a reliable-connected queue pair (ibv_create_qp(3), IBV_QPT_RC),
// connected through librdmacm with the cm_id's qp pointer set to it.
type qp struct {
	dev      *Device
	pd       *pd
	qp       *C.struct_ibv_qp
	num      uint32
	scq, rcq *cq
	maxSGE   int
	sqDepth  int // as reserved on the CQs
	rqDepth  int

	mu       sync.Mutex        // posting, rings, destroy
	desc     *C.struct_swr     // C memory: one send WR descriptor
	sges     *C.struct_ibv_sge // C memory: maxSGE SGEs
	sq       []sendEntry
	sqPosted uint64
	sqDone   uint64
	rq       []uint64 // caller's wr IDs by sequence
	rqPosted uint64
	rqDone   uint64
	gone     bool // QP destroyed

	emulateInv atomic.Bool // provider lacks IBV_WR_LOCAL_INV

	state  atomic.Uint32 // verbs.QPState
	failMu sync.Mutex
	err    error
	done   chan struct{}

	id            *C.struct_rdma_cm_id
	local, remote net.Addr
	closeOnce     sync.Once
}

var _ verbs.QP = (*qp)(nil)

func newQP(p *pd, attr verbs.QPAttr) (*qp, error) {
	d := p.dev
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq.dev != d || rcq.dev != d {
		return nil, fmt.Errorf("%w: CQs must be of this ibverbs device", verbs.ErrInvalidWR)
	}
	sq, rq, sge := attr.MaxSendWR, attr.MaxRecvWR, attr.MaxSGE
	if sq <= 0 {
		sq = 64
	}
	if rq <= 0 {
		rq = 64
	}
	if sge <= 0 {
		sge = 4
	}
	if d.mw {
		sq = 2*sq + 8 // room for the provider's Bind MW / Local Invalidate requests
	}
	if d.info.MaxQPWR > 0 {
		sq, rq = min(sq, d.info.MaxQPWR), min(rq, d.info.MaxQPWR)
	}
	if d.info.MaxSGE > 0 {
		sge = min(sge, d.info.MaxSGE)
	}
	// Every work request is signaled: the CQs must hold a completion for
	// each request that can be outstanding on all their QPs.
	if err := reserveCQ(scq, rcq, sq, rq); err != nil {
		return nil, err
	}
	var capOut C.struct_ibv_qp_cap
	h, err := C.gv_create_qp(p.pd, scq.cq, rcq.cq, C.int(sq), C.int(rq), C.int(sge), &capOut)
	if h == nil {
		unreserveCQ(scq, rcq, sq, rq)
		return nil, fmt.Errorf("ibverbs: ibv_create_qp(sq %d, rq %d, sge %d): %w", sq, rq, sge, errnoOr(err))
	}
	iw := 0
	if d.info.Transport == "iwarp" {
		iw = 1
	}
	if r := C.gv_qp_to_init(h, C.int(iw), 1); r != 0 {
		C.ibv_destroy_qp(h)
		unreserveCQ(scq, rcq, sq, rq)
		return nil, fmt.Errorf("ibverbs: ibv_modify_qp(INIT): %w", syscall.Errno(r))
	}
	q := &qp{dev: d, pd: p, qp: h, num: uint32(h.qp_num), scq: scq, rcq: rcq, sqDepth: sq, rqDepth: rq,
		maxSGE: int(capOut.max_send_sge), done: make(chan struct{})}
	if int(capOut.max_recv_sge) < q.maxSGE {
		q.maxSGE = int(capOut.max_recv_sge)
	}
	q.sq = make([]sendEntry, int(capOut.max_send_wr))
	q.rq = make([]uint64, int(capOut.max_recv_wr))
	q.desc = (*C.struct_swr)(C.calloc(1, C.sizeof_struct_swr))
	q.sges = (*C.struct_ibv_sge)(C.calloc(C.size_t(max(q.maxSGE, 1)), C.sizeof_struct_ibv_sge))
	q.state.Store(uint32(verbs.QPInit))
	d.regQP(q)
	return q, nil
}

func (q *qp) Num() uint32           { return q.num }
func (q *qp) State() verbs.QPState  { return verbs.QPState(q.state.Load()) }
func (q *qp) Done() <-chan struct{} { return q.done }
func (q *qp) LocalAddr() net.Addr   { return q.local }
func (q *qp) RemoteAddr() net.Addr  { return q.remote }
func (q *qp) Err() error {
	q.failMu.Lock()
	defer q.failMu.Unlock()
	return q.err
}

func (q *qp) sgeSlice() []C.struct_ibv_sge { return unsafe.Slice(q.sges, max(q.maxSGE, 1)) }

func (q *qp) fillSGL(sgl []verbs.SGE) {
	s := q.sgeSlice()
	for i, g := range sgl {
		s[i].addr = C.uint64_t(g.Addr)
		s[i].length = C.uint32_t(g.Length)
		s[i].lkey = C.uint32_t(g.LKey)
	}
}

// PostSend posts wr (ibv_post_send(3)). Every request is posted signaled;
// the completion of one the caller did not signal is dropped by Poll.
// Errors, nothing queued: ErrInvalidWR (opcode, SGL longer than MaxSGE, an
// RDMA Read with other than one SGE), ErrQPState (not RTS), ErrQueueFull.
func (q *qp) PostSend(wr *verbs.SendWR) error {
	var op C.int
	var wop verbs.WCOpcode
	switch wr.Opcode {
	case verbs.WRSend:
		op, wop = C.IBV_WR_SEND, verbs.WCSend
	case verbs.WRSendWithInv:
		op, wop = C.IBV_WR_SEND_WITH_INV, verbs.WCSend
	case verbs.WRRDMAWrite:
		op, wop = C.IBV_WR_RDMA_WRITE, verbs.WCRDMAWrite
	case verbs.WRRDMARead:
		op, wop = C.IBV_WR_RDMA_READ, verbs.WCRDMARead
		if len(wr.SGL) != 1 {
			return fmt.Errorf("%w: RDMA Read takes one SGE, not %d", verbs.ErrInvalidWR, len(wr.SGL))
		}
	case verbs.WRLocalInv:
		op, wop = C.IBV_WR_LOCAL_INV, verbs.WCLocalInv
		if len(wr.SGL) != 0 {
			return fmt.Errorf("%w: Local Invalidate takes no SGE", verbs.ErrInvalidWR)
		}
	default:
		return fmt.Errorf("%w: opcode %v", verbs.ErrInvalidWR, wr.Opcode)
	}
	if len(wr.SGL) > q.maxSGE {
		return fmt.Errorf("%w: %d SGEs, QP takes %d", verbs.ErrInvalidWR, len(wr.SGL), q.maxSGE)
	}
	flags := C.int(C.IBV_SEND_SIGNALED)
	if wr.Flags&verbs.SendSolicited != 0 {
		flags |= C.IBV_SEND_SOLICITED
	}
	if wr.Flags&verbs.SendFence != 0 {
		flags |= C.IBV_SEND_FENCE
	}
	if wr.Opcode == verbs.WRLocalInv && q.emulateInv.Load() {
		return q.emulateLocalInv(wr)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gone || verbs.QPState(q.state.Load()) != verbs.QPRTS {
		return fmt.Errorf("%w: QP %d is %v", verbs.ErrQPState, q.num, q.State())
	}
	if q.sqPosted-q.sqDone >= uint64(min(q.sqDepth, len(q.sq))) {
		return verbs.ErrQueueFull
	}
	q.fillSGL(wr.SGL)
	seq := q.sqPosted
	e := &q.sq[seq%uint64(len(q.sq))]
	*e = sendEntry{id: wr.ID, op: wop, signaled: wr.Flags&verbs.SendSignaled != 0}
	if wop == verbs.WCRDMARead {
		e.readLen = wr.SGL[0].Length
	}
	d := q.desc
	d.wr_id = C.uint64_t(sendBit | seq)
	d.remote_addr = C.uint64_t(wr.RemoteAddr)
	d.rkey = C.uint32_t(wr.RKey)
	d.inv_rkey = C.uint32_t(wr.InvalidateKey)
	d.opcode = op
	d.flags = flags
	d.num_sge = C.int(len(wr.SGL))
	if r := C.gv_post_send(q.qp, d, q.sges); r != 0 {
		if r == C.EINVAL && wr.Opcode == verbs.WRLocalInv {
			// The provider has no Local Invalidate work request
			// (libsiw): emulate it from now on.
			q.emulateInv.Store(true)
			q.mu.Unlock()
			defer q.mu.Lock()
			return q.emulateLocalInv(wr)
		}
		if r == C.ENOMEM {
			return fmt.Errorf("%w: ibv_post_send: %w", verbs.ErrQueueFull, syscall.Errno(r))
		}
		return fmt.Errorf("%w: ibv_post_send: %w", verbs.ErrInvalidWR, syscall.Errno(r))
	}
	q.sqPosted++
	if wr.Opcode == verbs.WRLocalInv {
		q.dev.invalidated(wr.InvalidateKey)
	}
	return nil
}

// postInternal posts a provider request (Bind MW, Local Invalidate).
func (q *qp) postInternal(what string, post func(wrID C.uint64_t) C.int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gone || verbs.QPState(q.state.Load()) != verbs.QPRTS {
		return
	}
	if q.sqPosted-q.sqDone >= uint64(min(q.sqDepth, len(q.sq))) {
		go q.fail(fmt.Errorf("%w: no send-queue room for %s", verbs.ErrQueueFull, what))
		return
	}
	seq := q.sqPosted
	q.sq[seq%uint64(len(q.sq))] = sendEntry{internal: true, what: what}
	if r := post(C.uint64_t(sendBit | seq)); r != 0 {
		go q.fail(fmt.Errorf("%w: %s: %w", verbs.ErrLocalError, what, syscall.Errno(r)))
		return
	}
	q.sqPosted++
}

// postBind binds m's type 2 window under its current rkey (Bind MW).
// The caller holds m.mu or owns m exclusively.
func (q *qp) postBind(m *mr) {
	if m.mw == nil {
		return
	}
	w, r, key := m.mw, m.mr, m.rkey.Load()
	addr, n, acc := m.Addr(), len(m.buf), mwAccess(m.access)
	q.postInternal("bind MW", func(id C.uint64_t) C.int {
		return C.gv_post_bind(q.qp, id, w, C.uint32_t(key), r, C.uint64_t(addr), C.uint64_t(n), acc)
	})
}

func (q *qp) postInternalInv(key uint32) {
	q.postInternal("local invalidate", func(id C.uint64_t) C.int {
		d := q.desc
		d.wr_id = id
		d.inv_rkey = C.uint32_t(key)
		d.opcode = C.IBV_WR_LOCAL_INV
		d.flags = C.IBV_SEND_SIGNALED
		d.num_sge = 0
		return C.gv_post_send(q.qp, d, q.sges)
	})
}

// sendDone returns and retires the entry of a send completion.
func (q *qp) sendDone(wrID uint64) sendEntry {
	q.mu.Lock()
	defer q.mu.Unlock()
	seq := wrID &^ sendBit
	e := q.sq[seq%uint64(len(q.sq))]
	q.sqDone++
	return e
}

func (q *qp) recvDone(wrID uint64) uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	id := q.rq[wrID%uint64(len(q.rq))]
	q.rqDone++
	return id
}

// PostRecv posts a receive (ibv_post_recv(3)); allowed in INIT and RTS.
// Errors: ErrInvalidWR, ErrQPState, ErrQueueFull.
func (q *qp) PostRecv(wr *verbs.RecvWR) error {
	if len(wr.SGL) > q.maxSGE {
		return fmt.Errorf("%w: %d SGEs, QP takes %d", verbs.ErrInvalidWR, len(wr.SGL), q.maxSGE)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gone || verbs.QPState(q.state.Load()) == verbs.QPError {
		return fmt.Errorf("%w: QP %d is %v", verbs.ErrQPState, q.num, q.State())
	}
	if q.rqPosted-q.rqDone >= uint64(min(q.rqDepth, len(q.rq))) {
		return verbs.ErrQueueFull
	}
	q.fillSGL(wr.SGL)
	seq := q.rqPosted
	q.rq[seq%uint64(len(q.rq))] = wr.ID
	if r := C.gv_post_recv(q.qp, C.uint64_t(seq), q.sges, C.int(len(wr.SGL))); r != 0 {
		if r == C.ENOMEM {
			return fmt.Errorf("%w: ibv_post_recv: %w", verbs.ErrQueueFull, syscall.Errno(r))
		}
		return fmt.Errorf("%w: ibv_post_recv: %w", verbs.ErrInvalidWR, syscall.Errno(r))
	}
	q.rqPosted++
	return nil
}

// fail moves the QP to the error state (first cause wins): the device
// flushes outstanding work (IBV_WC_WR_FLUSH_ERR), Done is closed.
func (q *qp) fail(cause error) {
	q.failMu.Lock()
	if q.err != nil {
		q.failMu.Unlock()
		return
	}
	q.err = cause
	q.state.Store(uint32(verbs.QPError))
	q.failMu.Unlock()
	q.mu.Lock()
	if !q.gone {
		C.gv_qp_to_err(q.qp)
	}
	q.mu.Unlock()
	close(q.done)
	q.pd.disconnected(q)
}

// established is called when the connection is up.
func (q *qp) established(id *C.struct_rdma_cm_id) {
	q.id = id
	q.local, q.remote = cmAddr(id, false), cmAddr(id, true)
	q.state.Store(uint32(verbs.QPRTS))
	q.pd.connected(q)
}

// cmEvent handles connection-manager events after the connection is up.
func (q *qp) cmEvent(e *cmEvent) {
	switch e.typ {
	case C.RDMA_CM_EVENT_DISCONNECTED:
		q.fail(fmt.Errorf("%w: peer disconnected", verbs.ErrDisconnect))
	case C.RDMA_CM_EVENT_DEVICE_REMOVAL:
		q.fail(fmt.Errorf("%w: device removed", verbs.ErrDisconnect))
	}
}

// Close disconnects (rdma_disconnect(3)), moves the QP to the error state
// and destroys it (ibv_destroy_qp(3)) and its cm_id.
func (q *qp) Close() error {
	q.closeOnce.Do(func() {
		if q.id != nil {
			C.gv_cm_disconnect(q.id)
		}
		q.fail(verbs.ErrClosed)
		if q.id != nil {
			q.dev.delHandler(q.id)
			C.gv_cm_destroy_id(q.id)
		}
		q.mu.Lock()
		q.gone = true
		C.ibv_destroy_qp(q.qp)
		C.free(unsafe.Pointer(q.desc))
		C.free(unsafe.Pointer(q.sges))
		q.mu.Unlock()
		q.dev.unregQP(q)
		unreserveCQ(q.scq, q.rcq, q.sqDepth, q.rqDepth)
	})
	return nil
}

// emulateLocalInv carries out a Local Invalidate on a provider without the
// work request (libsiw refuses IBV_WR_LOCAL_INV): the region's memory is
// registered again and the registration whose STag is invalidated is
// deregistered, so the STag no longer names memory; a signaled request
// gets its completion from the CQ (made by the provider, not the device).
// The completion may come before those of earlier requests.
func (q *qp) emulateLocalInv(wr *verbs.SendWR) error {
	if verbs.QPState(q.state.Load()) != verbs.QPRTS {
		return fmt.Errorf("%w: QP %d is %v", verbs.ErrQPState, q.num, q.State())
	}
	wc := verbs.WC{ID: wr.ID, Status: verbs.WCSuccess, Opcode: verbs.WCLocalInv, QPNum: q.num}
	if m := q.dev.mrByKey(wr.InvalidateKey); m != nil && m.pd == q.pd {
		if err := m.invalidateByReregister(wr.InvalidateKey); err != nil {
			wc.Status, wc.Err = verbs.WCLocQPOpErr, fmt.Errorf("%w: emulated local invalidate: %w", verbs.ErrLocalError, err)
		}
	}
	if wr.Flags&verbs.SendSignaled != 0 || wc.Status != verbs.WCSuccess {
		q.scq.pushSynthetic(wc)
	}
	return nil
}
