package perftest

import (
	"context"
	"errors"
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// Work request IDs: a kind in the upper 32 bits, an index in the lower.
const (
	idData     uint64 = 1 << 32 // send-queue data request | message number
	idDataRecv uint64 = 2 << 32 // data receive | buffer slot
	idCtrlSend uint64 = 3 << 32 // control Send | control slot
	idCtrlRecv uint64 = 4 << 32 // control receive | control slot
)

func idKind(id uint64) uint64 { return id &^ (1<<32 - 1) }
func idIndex(id uint64) int   { return int(uint32(id)) }

// Control slots of ctrlLen bytes each.
const (
	ctrlRecvSlots = 8 // receives for control messages (at most 5 are ever in flight)
	ctrlSendSlots = 8
)

// ULPDU is the FPDU payload both ends of driver perf send by default:
// the largest MPA allows (RFC 5044 section 4.1), which the provider may use
// because both ends are this stack. With FPDUPathMSS the client sizes its
// FPDUs by the path MSS instead, as Linux siw does.
const ULPDU = 64768

// newDevice returns the software iWARP device for one end. A device with
// noCRC follows its peer: CRC32c stays on unless both ends turn it off.
// RTRDelay is off: the peer is this stack, which reads the RTR at once.
func newDevice(noCRC, pathMSS bool) *siw.Device {
	cfg := siw.Config{NoCRC: noCRC, RTRDelay: -1, MaxULPDU: ULPDU}
	if pathMSS {
		cfg.MaxULPDU = 0
	}
	return siw.NewDevice(cfg)
}

// endpoint is one end's verbs resources: one completion queue for both work
// queues (one Wait covers sends and receives), a queue pair, a data region
// and a control region of ctrlRecvSlots+ctrlSendSlots messages.
type endpoint struct {
	pd   verbs.PD
	cq   verbs.CQ
	qp   verbs.QP
	data verbs.MR
	ctrl verbs.MR
	wcs  []verbs.WC

	ctrlBusy [ctrlSendSlots]bool // a control Send from the slot is in flight
	ctrlNext int
	ctrlWR   verbs.SendWR
	ctrlSGL  [1]verbs.SGE
	recvWR   verbs.RecvWR
	recvSGL  [1]verbs.SGE
}

// endpointSpec sizes an endpoint.
type endpointSpec struct {
	sendDepth  int // data send-queue requests (control slots are added)
	recvDepth  int // data receives (control slots are added)
	dataLen    int // bytes of the data region
	dataAccess verbs.Access
}

func newEndpoint(dev verbs.Device, sp endpointSpec) (_ *endpoint, err error) {
	e := &endpoint{}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	sq, rq := sp.sendDepth+ctrlSendSlots, sp.recvDepth+ctrlRecvSlots
	if e.cq, err = dev.CreateCQ(sq + rq); err != nil {
		return nil, err
	}
	e.wcs = make([]verbs.WC, sq+rq)
	if e.qp, err = e.pd.CreateQP(verbs.QPAttr{SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: sq, MaxRecvWR: rq, MaxSGE: 1}); err != nil {
		return nil, err
	}
	if e.data, err = e.pd.RegMR(make([]byte, sp.dataLen), sp.dataAccess); err != nil {
		return nil, err
	}
	if e.ctrl, err = e.pd.RegMR(make([]byte, (ctrlRecvSlots+ctrlSendSlots)*ctrlLen), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	e.ctrlWR = verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: e.ctrlSGL[:]}
	e.recvWR = verbs.RecvWR{SGL: e.recvSGL[:]}
	return e, nil
}

func (e *endpoint) close() {
	if e.qp != nil {
		_ = e.qp.Close()
	}
	if e.cq != nil {
		_ = e.cq.Close()
	}
	for _, m := range []verbs.MR{e.data, e.ctrl} {
		if m != nil {
			_ = m.Close()
		}
	}
	if e.pd != nil {
		_ = e.pd.Close()
	}
}

// postRecv posts a receive of n bytes at offset off of the data region.
func (e *endpoint) postRecv(slot, off, n int) error {
	e.recvWR.ID = idDataRecv | uint64(slot)
	e.recvSGL[0] = e.data.SGE(off, n)
	if err := e.qp.PostRecv(&e.recvWR); err != nil {
		return fmt.Errorf("perftest: posting a receive: %w", err)
	}
	return nil
}

// postCtrlRecvs posts every control receive slot.
func (e *endpoint) postCtrlRecvs() error {
	for i := 0; i < ctrlRecvSlots; i++ {
		if err := e.postCtrlRecv(i); err != nil {
			return err
		}
	}
	return nil
}

func (e *endpoint) postCtrlRecv(slot int) error {
	e.recvWR.ID = idCtrlRecv | uint64(slot)
	e.recvSGL[0] = e.ctrl.SGE(slot*ctrlLen, ctrlLen)
	if err := e.qp.PostRecv(&e.recvWR); err != nil {
		return fmt.Errorf("perftest: posting a control receive: %w", err)
	}
	return nil
}

// ctrlRecv parses the control message a receive completion delivered and,
// for a credit, posts its slot again. The other messages end a run (done;
// ack and verdict, which follow each other): the peer may disconnect right
// after them, and the slots posted at the start are enough for them.
func (e *endpoint) ctrlRecv(wc *verbs.WC) (ctrlMsg, error) {
	slot := idIndex(wc.ID)
	if slot >= ctrlRecvSlots {
		return ctrlMsg{}, fmt.Errorf("%w: completion for control slot %d", ErrProtocol, slot)
	}
	m, err := parseCtrl(e.ctrl.Bytes()[slot*ctrlLen : slot*ctrlLen+int(wc.ByteLen)])
	if err != nil || m.kind != ctrlCredit {
		return m, err
	}
	return m, e.postCtrlRecv(slot)
}

// trySendCtrl sends m from the next control slot; it reports false, sending
// nothing, while that slot's previous Send has not completed.
func (e *endpoint) trySendCtrl(m ctrlMsg) (bool, error) {
	slot := e.ctrlNext
	if e.ctrlBusy[slot] {
		return false, nil
	}
	off := (ctrlRecvSlots + slot) * ctrlLen
	m.put(e.ctrl.Bytes()[off : off+ctrlLen])
	e.ctrlWR.ID = idCtrlSend | uint64(slot)
	e.ctrlSGL[0] = e.ctrl.SGE(off, ctrlLen)
	if err := e.qp.PostSend(&e.ctrlWR); err != nil {
		return false, fmt.Errorf("perftest: sending a control message: %w", err)
	}
	e.ctrlBusy[slot] = true
	e.ctrlNext = (slot + 1) % ctrlSendSlots
	return true, nil
}

// ctrlSent frees the slot of a completed control Send.
func (e *endpoint) ctrlSent(wc *verbs.WC) { e.ctrlBusy[idIndex(wc.ID)%ctrlSendSlots] = false }

// ctrlIdle reports whether every control Send completed.
func (e *endpoint) ctrlIdle() bool {
	for _, b := range e.ctrlBusy {
		if b {
			return false
		}
	}
	return true
}

// reap waits for at least one completion and returns what it polled. It
// does not look at the statuses.
func (e *endpoint) reap(ctx context.Context) ([]verbs.WC, error) {
	for {
		if n := e.cq.Poll(e.wcs); n > 0 {
			return e.wcs[:n], nil
		}
		if err := e.cq.Wait(ctx); err != nil {
			if qerr := e.qp.Err(); qerr != nil && errors.Is(err, verbs.ErrClosed) {
				err = qerr
			}
			return nil, fmt.Errorf("perftest: waiting for a completion: %w", err)
		}
	}
}

// wcError describes a failed completion.
func wcError(wc *verbs.WC) error {
	if wc.Err != nil {
		return fmt.Errorf("perftest: %v completion (id %#x): %v: %w", wc.Opcode, wc.ID, wc.Status, wc.Err)
	}
	return fmt.Errorf("perftest: %v completion (id %#x): %v", wc.Opcode, wc.ID, wc.Status)
}
