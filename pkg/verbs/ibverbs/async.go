//go:build ibverbs

package ibverbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// Asynchronous events (ibv_get_async_event(3)) are per device context,
// which every Device opened on that device shares, so one reader per
// context serves them all: it parks on the context's async_fd (made
// non-blocking, in the Go poller) and moves the QP an error event names
// to the error state (IBV_EVENT_QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR: for
// example the responder side of a remote access violation, which produces
// no completion there).

var (
	asyncMu      sync.Mutex
	asyncStarted = map[*C.struct_ibv_context]bool{}
	asyncDevs    = map[*C.struct_ibv_context]map[*Device]bool{}
)

func (d *Device) startAsync() {
	asyncMu.Lock()
	defer asyncMu.Unlock()
	if asyncDevs[d.ctx] == nil {
		asyncDevs[d.ctx] = map[*Device]bool{}
	}
	asyncDevs[d.ctx][d] = true
	if asyncStarted[d.ctx] {
		return
	}
	f, err := pollable(int(d.ctx.async_fd), "ibv_async")
	if err != nil {
		return // no async events: errors are still seen in completions
	}
	asyncStarted[d.ctx] = true
	go asyncLoop(d.ctx, f)
}

func (d *Device) stopAsync() {
	asyncMu.Lock()
	delete(asyncDevs[d.ctx], d)
	asyncMu.Unlock()
}

func asyncLoop(c *C.struct_ibv_context, f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	var typ C.int
	var n C.uint32_t
	rc.Read(func(uintptr) bool {
		for {
			r := C.gv_get_async_event(c, &typ, &n)
			if r == 0 {
				return false
			}
			if r < 0 {
				return true
			}
			asyncEvent(c, typ, uint32(n))
		}
	})
}

func asyncQP(c *C.struct_ibv_context, qpn uint32) *qp {
	asyncMu.Lock()
	defer asyncMu.Unlock()
	for d := range asyncDevs[c] {
		if q := d.qpByNum(qpn); q != nil {
			return q
		}
	}
	return nil
}

func asyncEvent(c *C.struct_ibv_context, typ C.int, n uint32) {
	switch typ {
	case C.IBV_EVENT_QP_FATAL, C.IBV_EVENT_QP_REQ_ERR, C.IBV_EVENT_QP_ACCESS_ERR:
		if q := asyncQP(c, n); q != nil {
			q.fail(fmt.Errorf("%w: %s on QP %d", asyncSentinel(typ), C.GoString(C.ibv_event_type_str(uint32(typ))), n))
		}
	}
}

func asyncSentinel(typ C.int) error {
	if typ == C.IBV_EVENT_QP_ACCESS_ERR || typ == C.IBV_EVENT_QP_REQ_ERR {
		return verbs.ErrRemoteError
	}
	return verbs.ErrLocalError
}
