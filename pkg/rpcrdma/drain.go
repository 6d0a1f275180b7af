package rpcrdma

import (
	"context"
	"sync"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// cqDrain is how one connection takes its completions: a completion
// goroutine waits on the CQ (no busy polling) and, when the CQ takes a
// handler (verbs.CQHandler), the provider's goroutine that delivered a
// receive drains it too, so that a reply reaches its caller (a call its
// worker) without a hand-off to the completion goroutine. Both drain one
// at a time, so completions are handled one by one in their order.
type cqDrain struct {
	cq verbs.CQ
	// complete handles one completion; false stops the drain (the
	// connection is over).
	complete func(*verbs.WC) bool

	mu      sync.Mutex
	wcs     [32]verbs.WC // under mu
	stopped bool         // under mu
}

// drain hands complete every completion the CQ holds. It returns how many
// it polled, and false once stopped.
func (d *cqDrain) drain() (int, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	total := 0
	for !d.stopped {
		n := d.cq.Poll(d.wcs[:])
		for i := range d.wcs[:n] {
			if !d.complete(&d.wcs[i]) {
				d.stopped = true
				break
			}
		}
		total += n
		if n < len(d.wcs) {
			break
		}
	}
	return total, !d.stopped
}

// take drains the CQ from a goroutine other than the completion goroutine:
// a worker that just posted a Send, which the provider may have completed
// before PostSend returned (software iWARP transmits a small Send in the
// poster's goroutine), takes that completion itself instead of parking
// until the completion goroutine wakes and passes it on. stop (if not nil)
// is called when complete stopped the drain, as the handler does.
func (d *cqDrain) take(stop func()) {
	if _, ok := d.drain(); !ok && stop != nil {
		stop()
	}
}

// run is the completion goroutine: it drains the CQ until complete stops
// it (nil) or Wait fails (ctx ended, the CQ closed: Wait's error). The
// handler calls stop (if not nil) when complete stopped the drain, so that
// run's Wait ends. When run returns the handler is gone and a handler call
// in progress has ended: nothing completes after it.
func (d *cqDrain) run(ctx context.Context, stop func()) error {
	if h, ok := d.cq.(verbs.CQHandler); ok {
		h.SetHandler(func() {
			if _, ok := d.drain(); !ok && stop != nil {
				stop()
			}
		})
		defer func() {
			h.SetHandler(nil)
			d.mu.Lock()
			d.stopped = true
			d.mu.Unlock()
		}()
	}
	for {
		n, ok := d.drain()
		if !ok {
			return nil
		}
		if n == 0 {
			if err := d.cq.Wait(ctx); err != nil {
				return err
			}
		}
	}
}
