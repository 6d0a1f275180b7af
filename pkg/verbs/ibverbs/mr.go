//go:build ibverbs

package ibverbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// pd is a protection domain (ibv_alloc_pd(3)).
type pd struct {
	dev *Device
	pd  *C.struct_ibv_pd

	mu      sync.Mutex
	qps     []*qp // connected QPs of this PD: where memory windows are bound
	pending []*mr // memory windows waiting for a connected QP to bind on
	closed  bool
	cache   *regCache // nil: no registration cache
}

func ibvAccess(a verbs.Access) C.int {
	var f C.int
	if a&verbs.AccessLocalWrite != 0 {
		f |= C.IBV_ACCESS_LOCAL_WRITE
	}
	if a&verbs.AccessRemoteWrite != 0 {
		f |= C.IBV_ACCESS_REMOTE_WRITE | C.IBV_ACCESS_LOCAL_WRITE
	}
	if a&verbs.AccessRemoteRead != 0 {
		f |= C.IBV_ACCESS_REMOTE_READ
	}
	return f
}

func mwAccess(a verbs.Access) C.int {
	var f C.int
	if a&verbs.AccessRemoteWrite != 0 {
		f |= C.IBV_ACCESS_REMOTE_WRITE
	}
	if a&verbs.AccessRemoteRead != 0 {
		f |= C.IBV_ACCESS_REMOTE_READ
	}
	return f
}

// RegMR registers buf (ibv_reg_mr(3)) with access. The caller's Go memory
// is registered in place: it is pinned with a runtime.Pinner until Close,
// and buf must not be used for anything else the region's rights do not
// allow while registered. The tagged offset (Addr) is buf's virtual
// address. On a device with type 2 memory windows a region with remote
// rights gets a window (ibv_alloc_mw(3)) whose rkey is the region's STag,
// bound by a Bind MW work request on the PD's connected QP before any
// later work request (see the package doc). Errors: ErrInvalidWR for an
// empty buf, ErrClosed, libibverbs errno (ENOMEM: locked-memory limit).
func (p *pd) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty memory region", verbs.ErrInvalidWR)
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, verbs.ErrClosed
	}
	m := &mr{pd: p, buf: buf, access: access}
	m.useMW = p.dev.mw && access&(verbs.AccessRemoteRead|verbs.AccessRemoteWrite) != 0
	if m.useMW && p.cache != nil {
		// cached registrations carry every right; the window bound per
		// region carries the region's remote rights
		e, err := p.cache.get(buf, C.IBV_ACCESS_LOCAL_WRITE|C.IBV_ACCESS_REMOTE_READ|C.IBV_ACCESS_REMOTE_WRITE|C.IBV_ACCESS_MW_BIND)
		if err != nil {
			return nil, err
		}
		m.cached, m.mr = e, e.mr
		m.lkey.Store(uint32(e.mr.lkey))
	} else {
		m.pin.Pin(&buf[0])
		if err := m.register(); err != nil {
			m.pin.Unpin()
			return nil, err
		}
	}
	if m.useMW {
		w, err := C.gv_alloc_mw2(p.pd)
		if w == nil {
			err = errnoOr(err)
			m.release()
			return nil, fmt.Errorf("ibverbs: ibv_alloc_mw(type 2): %w", err)
		}
		m.mw = w
		key := incKey(uint32(C.gv_mw_rkey(w)))
		m.rkey.Store(key)
		p.dev.setRKey(m, 0, key)
		m.valid.Store(true)
		p.bind(m)
	} else {
		m.rkey.Store(uint32(m.mr.rkey))
		p.dev.setRKey(m, 0, uint32(m.mr.rkey))
		m.valid.Store(true)
	}
	return m, nil
}

// incKey rotates the 8-bit consumer key of an STag (ibv_inc_rkey(3)).
func incKey(k uint32) uint32 { return k&^0xff | (k+1)&0xff }

// bind binds m's window now on a connected QP of the PD, or when the
// first QP of the PD is connected.
func (p *pd) bind(m *mr) {
	p.mu.Lock()
	var q *qp
	if len(p.qps) > 0 {
		q = p.qps[0]
	} else {
		p.pending = append(p.pending, m)
	}
	p.mu.Unlock()
	if q != nil {
		q.postBind(m)
	}
}

// connected is called when q became RTS: windows registered before are
// bound on it.
func (p *pd) connected(q *qp) {
	p.mu.Lock()
	p.qps = append(p.qps, q)
	pend := p.pending
	p.pending = nil
	p.mu.Unlock()
	for _, m := range pend {
		q.postBind(m)
	}
}

func (p *pd) disconnected(q *qp) {
	p.mu.Lock()
	for i, x := range p.qps {
		if x == q {
			p.qps = append(p.qps[:i], p.qps[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
}

// CreateQP creates a reliable-connected QP in INIT (see qp.go).
func (p *pd) CreateQP(attr verbs.QPAttr) (verbs.QP, error) { return newQP(p, attr) }

// Close deallocates the PD (ibv_dealloc_pd(3)); its regions and QPs must
// be closed first (EBUSY otherwise).
func (p *pd) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	if p.cache != nil {
		p.cache.drain()
	}
	if r := C.ibv_dealloc_pd(p.pd); r != 0 {
		return fmt.Errorf("ibverbs: ibv_dealloc_pd: %w", syscall.Errno(r))
	}
	return nil
}

// mr is a registered memory region, optionally exposed through a type 2
// memory window.
type mr struct {
	pd     *pd
	buf    []byte
	pin    runtime.Pinner
	access verbs.Access
	useMW  bool

	mu     sync.Mutex // serialises Rekey and Close
	cached *regEntry  // the registration is the cache's (memory-window mode)
	mr     *C.struct_ibv_mr
	mw     *C.struct_ibv_mw
	lkey   atomic.Uint32
	rkey   atomic.Uint32
	valid  atomic.Bool
	closed bool
}

func (m *mr) register() error {
	acc := ibvAccess(m.access)
	if m.useMW {
		acc |= C.IBV_ACCESS_MW_BIND
	}
	r, err := C.gv_reg_mr(m.pd.pd, unsafe.Pointer(&m.buf[0]), C.size_t(len(m.buf)), acc)
	if r == nil {
		return fmt.Errorf("ibverbs: ibv_reg_mr(%d bytes): %w", len(m.buf), errnoOr(err))
	}
	m.mr = r
	m.lkey.Store(uint32(r.lkey))
	return nil
}

func (m *mr) LKey() uint32         { return m.lkey.Load() }
func (m *mr) RKey() uint32         { return m.rkey.Load() }
func (m *mr) Addr() uint64         { return uint64(uintptr(unsafe.Pointer(&m.buf[0]))) }
func (m *mr) Len() int             { return len(m.buf) }
func (m *mr) Bytes() []byte        { return m.buf }
func (m *mr) Access() verbs.Access { return m.access }
func (m *mr) Valid() bool          { return m.valid.Load() }
func (m *mr) SGE(off, n int) verbs.SGE {
	return verbs.SGE{Addr: m.Addr() + uint64(off), Length: uint32(n), LKey: m.lkey.Load()}
}

// Rekey makes the region valid under a new STag and returns it. With a
// memory window: a Local Invalidate (if still valid) and a Bind MW with the
// consumer key incremented, posted on the PD's connected QP ahead of any
// later work request. Without: the memory is registered again
// (ibv_reg_mr(3)) and the old registration deregistered, so the old STag
// no longer names it. A failure leaves the region invalid (Valid false).
func (m *mr) Rekey() uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return m.rkey.Load()
	}
	old := m.rkey.Load()
	if m.useMW {
		key := incKey(old)
		if m.valid.Load() {
			m.pd.invalidateMW(m, old)
		}
		m.rkey.Store(key)
		m.pd.dev.setRKey(m, old, key)
		m.valid.Store(true)
		m.pd.bind(m)
		return key
	}
	oldMR := m.mr
	if err := m.register(); err != nil {
		m.mr = oldMR
		m.valid.Store(false)
		return old
	}
	C.ibv_dereg_mr(oldMR)
	key := uint32(m.mr.rkey)
	m.rkey.Store(key)
	m.pd.dev.setRKey(m, old, key)
	m.valid.Store(true)
	return key
}

func (p *pd) invalidateMW(m *mr, key uint32) {
	p.mu.Lock()
	var q *qp
	if len(p.qps) > 0 {
		q = p.qps[0]
	}
	p.mu.Unlock()
	if q != nil {
		q.postInternalInv(key)
	}
	m.valid.Store(false)
}

// Close deregisters the region (ibv_dealloc_mw(3), ibv_dereg_mr(3)) and
// unpins its memory.
func (m *mr) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	m.valid.Store(false)
	m.pd.dev.setRKey(m, m.rkey.Load(), 0)
	p := m.pd
	p.mu.Lock()
	for i, x := range p.pending {
		if x == m {
			p.pending = append(p.pending[:i], p.pending[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	var err error
	if m.mw != nil {
		if r := C.gv_dealloc_mw(m.mw); r != 0 {
			err = fmt.Errorf("ibverbs: ibv_dealloc_mw: %w", syscall.Errno(r))
		}
		m.mw = nil
	}
	if rerr := m.release(); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// release gives the registration back: to the cache, or deregistered.
func (m *mr) release() error {
	if m.cached != nil {
		m.pd.cache.put(m.cached)
		m.cached = nil
		return nil
	}
	r := C.ibv_dereg_mr(m.mr)
	m.pin.Unpin()
	if r != 0 {
		return fmt.Errorf("ibverbs: ibv_dereg_mr: %w", syscall.Errno(r))
	}
	return nil
}

// invalidateByReregister invalidates key (an emulated Local Invalidate):
// the memory is registered again and the registration named by key is
// deregistered. The region stays invalid until Rekey.
func (m *mr) invalidateByReregister(key uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.useMW || m.rkey.Load() != key {
		return nil
	}
	m.valid.Store(false)
	oldMR := m.mr
	if err := m.register(); err != nil {
		m.mr = oldMR
		return err
	}
	C.ibv_dereg_mr(oldMR)
	return nil
}
