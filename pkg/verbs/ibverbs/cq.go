//go:build ibverbs

package ibverbs

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// pollBatch is how many work completions one ibv_poll_cq(3) call moves.
const pollBatch = 64

// cq is a completion queue with its own completion channel
// (ibv_create_comp_channel(3)); the channel's fd sits in the Go runtime's
// poller, so Wait parks the goroutine (no spinning, no OS thread held).
type cq struct {
	dev  *Device
	cq   *C.struct_ibv_cq
	ch   *C.struct_ibv_comp_channel
	f    *os.File
	rc   syscall.RawConn
	size int

	mu      sync.Mutex // serialises polling and Close
	wcs     []C.struct_ibv_wc
	pending []verbs.WC // converted completions found by Wait, handed out by Poll first
	closed  atomic.Bool

	resMu    sync.Mutex
	reserved int // completions the attached QPs can have outstanding

	smu    sync.Mutex // leaf lock: completions made by the provider
	synth  []verbs.WC
	kicked atomic.Bool
}

// CreateCQ creates a completion queue (ibv_create_cq(3)) of at least
// 2*depth+64 entries, capped by the device's max_cqe: the provider asks
// for a completion of every send work request (to keep send-queue
// accounting exact on every device) and hides those the caller did not
// ask for, so the CQ is sized above the caller's count. Errors:
// ErrInvalidWR for depth <= 0, libibverbs errno.
func (d *Device) CreateCQ(depth int) (verbs.CQ, error) {
	if depth <= 0 {
		return nil, fmt.Errorf("%w: CQ depth %d", verbs.ErrInvalidWR, depth)
	}
	if d.closed.Load() {
		return nil, verbs.ErrClosed
	}
	n := 2*depth + 64
	if d.info.MaxCQE > 0 && n > d.info.MaxCQE {
		n = d.info.MaxCQE
	}
	ch, err := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		return nil, fmt.Errorf("ibverbs: ibv_create_comp_channel: %w", errnoOr(err))
	}
	c, err := C.ibv_create_cq(d.ctx, C.int(n), nil, ch, 0)
	if c == nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, fmt.Errorf("ibverbs: ibv_create_cq(%d): %w", n, errnoOr(err))
	}
	f, err := pollable(int(ch.fd), "ibv_comp_channel")
	if err != nil {
		C.ibv_destroy_cq(c)
		C.ibv_destroy_comp_channel(ch)
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		C.ibv_destroy_cq(c)
		C.ibv_destroy_comp_channel(ch)
		return nil, err
	}
	return &cq{dev: d, cq: c, ch: ch, f: f, rc: rc, size: int(c.cqe), wcs: make([]C.struct_ibv_wc, pollBatch),
		pending: make([]verbs.WC, 0, pollBatch)}, nil
}

// Poll moves up to len(wc) completions into wc: first those Wait found,
// then from the CQ in batches of up to 64 per ibv_poll_cq(3) call.
func (c *cq) Poll(wc []verbs.WC) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	if len(c.pending) > 0 {
		n = copy(wc, c.pending)
		c.pending = c.pending[:copy(c.pending, c.pending[n:])]
	}
	if n < len(wc) {
		n += c.takeSynthetic(wc[n:])
	}
	if n < len(wc) && !c.closed.Load() {
		n += c.pollLocked(wc[n:])
	}
	return n
}

// pushSynthetic queues a completion made by the provider and wakes Wait.
func (c *cq) pushSynthetic(wc verbs.WC) {
	c.smu.Lock()
	c.synth = append(c.synth, wc)
	c.smu.Unlock()
	c.kicked.Store(true)
	c.f.SetReadDeadline(pastDeadline)
}

func (c *cq) takeSynthetic(out []verbs.WC) int {
	c.smu.Lock()
	defer c.smu.Unlock()
	n := copy(out, c.synth)
	c.synth = c.synth[:copy(c.synth, c.synth[n:])]
	return n
}

func (c *cq) hasSynthetic() bool {
	c.smu.Lock()
	defer c.smu.Unlock()
	return len(c.synth) > 0
}

// pollLocked polls the CQ into out, converting and dropping the
// completions the provider asked for on its own.
func (c *cq) pollLocked(out []verbs.WC) int {
	n := 0
	for n < len(out) {
		want := min(len(out)-n, pollBatch)
		got := int(C.gv_poll_cq(c.cq, C.int(want), &c.wcs[0]))
		if got <= 0 {
			break
		}
		for i := range got {
			if c.convert(&c.wcs[i], &out[n]) {
				n++
			}
		}
		if got < want {
			break
		}
	}
	return n
}

// Wait blocks until a completion can be polled: it arms the CQ
// (ibv_req_notify_cq(3)), polls once more (a completion that came before
// arming raises no event), and otherwise parks until the completion
// channel's fd is readable, then consumes and acknowledges the event
// (ibv_get_cq_event(3), ibv_ack_cq_events(3)). It returns ctx's error when
// ctx ends first, ErrClosed when the CQ is closed.
func (c *cq) Wait(ctx context.Context) error {
	for {
		if c.closed.Load() {
			return verbs.ErrClosed
		}
		c.mu.Lock()
		if len(c.pending) > 0 || c.hasSynthetic() {
			c.mu.Unlock()
			return nil
		}
		if r := C.gv_req_notify(c.cq); r != 0 {
			c.mu.Unlock()
			return fmt.Errorf("ibverbs: ibv_req_notify_cq: %w", syscall.Errno(r))
		}
		c.pending = c.pending[:cap(c.pending)]
		k := c.pollLocked(c.pending)
		c.pending = c.pending[:k]
		c.mu.Unlock()
		if k > 0 {
			return nil
		}
		if err := c.waitEvent(ctx); err != nil {
			return err
		}
		if c.hasSynthetic() {
			return nil
		}
		// An event: loop to see whether a completion for the caller is there
		// (events also come for completions the provider drops).
		c.mu.Lock()
		c.pending = c.pending[:cap(c.pending)]
		k = c.pollLocked(c.pending)
		c.pending = c.pending[:k]
		c.mu.Unlock()
		if k > 0 {
			return nil
		}
	}
}

var pastDeadline = time.Unix(1, 0)

func (c *cq) waitEvent(ctx context.Context) error {
	rc := c.rc
	var err error
	var stop func() bool
	if ctx.Done() != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		stop = context.AfterFunc(ctx, func() { c.f.SetReadDeadline(pastDeadline) })
	}
	var got int
	err = rc.Read(func(uintptr) bool {
		got = int(C.gv_get_cq_event(c.ch))
		return got != 0
	})
	if stop != nil && !stop() {
		c.f.SetReadDeadline(time.Time{})
	}
	if c.kicked.Swap(false) {
		c.f.SetReadDeadline(time.Time{})
		if ctx.Err() == nil && c.hasSynthetic() {
			return nil
		}
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		// woken by pushSynthetic (or a ctx deadline that raced with a
		// previous Wait): the caller polls again
		c.f.SetReadDeadline(time.Time{})
		return nil
	case err != nil:
		if c.closed.Load() || errors.Is(err, os.ErrClosed) {
			return verbs.ErrClosed
		}
		return fmt.Errorf("ibverbs: completion channel: %w", err)
	case got < 0:
		return fmt.Errorf("ibverbs: ibv_get_cq_event: %w", syscall.Errno(-got))
	}
	return nil
}

// Close destroys the CQ and its channel (ibv_destroy_cq(3)); the QPs
// using it must be closed first.
func (c *cq) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.f.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if r := C.ibv_destroy_cq(c.cq); r != 0 {
		err = fmt.Errorf("ibverbs: ibv_destroy_cq: %w", syscall.Errno(r))
	}
	if r := C.ibv_destroy_comp_channel(c.ch); r != 0 && err == nil {
		err = fmt.Errorf("ibverbs: ibv_destroy_comp_channel: %w", syscall.Errno(r))
	}
	return err
}

// wcStatus maps enum ibv_wc_status (ibv_poll_cq(3)) to the model.
func wcStatus(s C.enum_ibv_wc_status) (verbs.WCStatus, error) {
	switch s {
	case C.IBV_WC_SUCCESS:
		return verbs.WCSuccess, nil
	case C.IBV_WC_LOC_LEN_ERR:
		return verbs.WCLocLenErr, verbs.ErrLocalError
	case C.IBV_WC_LOC_PROT_ERR, C.IBV_WC_MW_BIND_ERR:
		return verbs.WCLocProtErr, verbs.ErrInvalidKey
	case C.IBV_WC_LOC_QP_OP_ERR, C.IBV_WC_LOC_EEC_OP_ERR:
		return verbs.WCLocQPOpErr, verbs.ErrLocalError
	case C.IBV_WC_WR_FLUSH_ERR:
		return verbs.WCFlushErr, verbs.ErrDisconnect
	case C.IBV_WC_REM_ACCESS_ERR:
		return verbs.WCRemAccessErr, verbs.ErrRemoteError
	case C.IBV_WC_REM_OP_ERR, C.IBV_WC_REM_INV_REQ_ERR, C.IBV_WC_REM_INV_RD_REQ_ERR, C.IBV_WC_REM_ABORT_ERR:
		return verbs.WCRemOpErr, verbs.ErrRemoteError
	case C.IBV_WC_RETRY_EXC_ERR, C.IBV_WC_RNR_RETRY_EXC_ERR:
		return verbs.WCFatalErr, verbs.ErrTimeout
	}
	return verbs.WCFatalErr, verbs.ErrProtocol
}

// convert turns one ibv_wc into out, updating the QP's bookkeeping. It
// returns false for completions the caller did not ask for.
func (c *cq) convert(w *C.struct_ibv_wc, out *verbs.WC) bool {
	q := c.dev.qpByNum(uint32(w.qp_num))
	if q == nil {
		return false // its QP is gone
	}
	st, sentinel := wcStatus(w.status)
	id := uint64(w.wr_id)
	*out = verbs.WC{Status: st, QPNum: q.num}
	if id&sendBit == 0 {
		out.ID = q.recvDone(id)
		out.Opcode = verbs.WCRecv
		if st == verbs.WCSuccess {
			out.ByteLen = uint32(w.byte_len)
			if withInv(uint32(w.wc_flags), uint32(C.gv_wc_inv_rkey(w))) {
				out.Flags |= verbs.WCWithInv
				out.InvalidatedKey = uint32(C.gv_wc_inv_rkey(w))
				c.dev.invalidated(out.InvalidatedKey)
			}
		}
	} else {
		e := q.sendDone(id)
		if e.internal {
			if st != verbs.WCSuccess && st != verbs.WCFlushErr {
				q.fail(fmt.Errorf("%w: internal %s: %s (vendor error 0x%x)", sentinel, e.what, C.GoString(C.ibv_wc_status_str(w.status)), uint32(w.vendor_err)))
			}
			return false
		}
		out.ID = e.id
		out.Opcode = e.op
		if st == verbs.WCSuccess {
			if !e.signaled {
				return false
			}
			if e.op == verbs.WCRDMARead {
				out.ByteLen = e.readLen
			}
		}
	}
	if st != verbs.WCSuccess {
		out.Err = fmt.Errorf("%w: %s on QP %d: %s (vendor error 0x%x)", sentinel, out.Opcode, q.num, C.GoString(C.ibv_wc_status_str(w.status)), uint32(w.vendor_err))
		if st == verbs.WCFlushErr {
			if qe := q.Err(); qe != nil {
				out.Err = fmt.Errorf("%w: %s flushed: %w", verbs.ErrDisconnect, out.Opcode, qe)
			}
		}
		q.fail(out.Err)
	}
	return true
}

// wcStatusOf is wcStatus for tests (cgo is not allowed in _test files).
func wcStatusOf(s int) (verbs.WCStatus, error) { return wcStatus(C.enum_ibv_wc_status(s)) }

// withInv reports whether a receive completion's Send invalidated an STag.
// Besides IBV_WC_WITH_INV it takes IBV_WC_IP_CSUM_OK with a non-zero
// invalidated_rkey: Linux rxe (6.1, with rdma-core 44) writes the
// kernel's IB_WC_WITH_INVALIDATE (1<<2) into the user-space completion,
// which is libibverbs' IBV_WC_IP_CSUM_OK; checksum offload flags have no
// meaning on an RC QP, and without WITH_IMM the union holds the rkey.
func withInv(flags, rkey uint32) bool {
	if flags&C.IBV_WC_WITH_INV != 0 {
		return true
	}
	return flags&C.IBV_WC_IP_CSUM_OK != 0 && flags&C.IBV_WC_WITH_IMM == 0 && rkey != 0
}

// reserveCQ accounts sq send and rq receive requests on the CQs, growing a
// CQ (ibv_resize_cq(3)) that would be too small. Errors: ErrInvalidWR when
// it cannot grow (an overrun would fail every QP on it).
func reserveCQ(scq, rcq *cq, sq, rq int) error {
	if err := scq.reserve(sq); err != nil {
		return err
	}
	if err := rcq.reserve(rq); err != nil {
		scq.unreserve(sq)
		return err
	}
	return nil
}

func unreserveCQ(scq, rcq *cq, sq, rq int) {
	scq.unreserve(sq)
	rcq.unreserve(rq)
}

func (c *cq) reserve(n int) error {
	c.resMu.Lock()
	defer c.resMu.Unlock()
	need := c.reserved + n
	if need > c.size {
		c.mu.Lock()
		r := C.ibv_resize_cq(c.cq, C.int(need))
		if r < 0 {
			r = -r
		}
		if r == 0 {
			c.size = int(c.cq.cqe)
		}
		c.mu.Unlock()
		if r != 0 || c.size < need {
			return fmt.Errorf("%w: CQ of %d entries cannot hold the %d completions its QPs may have outstanding (ibv_resize_cq: %v); create it deeper",
				verbs.ErrInvalidWR, c.size, need, syscall.Errno(r))
		}
	}
	c.reserved = need
	return nil
}

func (c *cq) unreserve(n int) {
	c.resMu.Lock()
	c.reserved -= n
	c.resMu.Unlock()
}
