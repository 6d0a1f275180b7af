package siw

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// cq is a completion queue: a fixed ring of completions, a notification
// channel for waiters, no polling loop; and, when set, a handler that the
// receive goroutine of a QP calls after it delivered a receive completion
// (verbs.CQHandler).
type cq struct {
	mu      sync.Mutex
	ring    []verbs.WC
	head, n int
	notify  chan struct{} // capacity 1: "something arrived"
	closed  chan struct{}
	once    sync.Once
	handler atomic.Pointer[func()]
}

var _ verbs.CQHandler = (*cq)(nil)

// SetHandler implements verbs.CQHandler: h runs on the receive goroutine
// of the QP that delivered a receive completion, after the completion is
// in the queue and with none of the QP's locks held, in place of waking a
// Wait; other completions (send queue, flushes) still wake Wait. Calls of
// h from several QPs sharing the queue may overlap. nil removes it.
func (c *cq) SetHandler(h func()) {
	if h == nil {
		c.handler.Store(nil)
		return
	}
	c.handler.Store(&h)
}

func newCQ(depth int) *cq {
	return &cq{ring: make([]verbs.WC, depth), notify: make(chan struct{}, 1), closed: make(chan struct{})}
}

// push adds a completion; it reports false when the ring is full (CQ
// overrun: the QP that produced it goes to error).
func (c *cq) push(wc *verbs.WC) bool {
	if !c.add(wc) {
		return false
	}
	c.wake()
	return true
}

// pushRecv is push for the receive goroutine's completions: with a
// handler set, Wait is not woken and handlerDue reports true; the
// receive goroutine then calls the handler (runHandler) once its locks
// are released.
func (c *cq) pushRecv(wc *verbs.WC) (ok, handlerDue bool) {
	if !c.add(wc) {
		return false, false
	}
	if c.handler.Load() != nil {
		return true, true
	}
	c.wake()
	return true, false
}

func (c *cq) add(wc *verbs.WC) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == len(c.ring) {
		return false
	}
	c.ring[(c.head+c.n)%len(c.ring)] = *wc
	c.n++
	return true
}

func (c *cq) wake() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// runHandler calls the handler, or wakes Wait when it was removed
// meanwhile.
func (c *cq) runHandler() {
	if h := c.handler.Load(); h != nil {
		(*h)()
		return
	}
	c.wake()
}

func (c *cq) Poll(wc []verbs.WC) int {
	c.mu.Lock()
	k := 0
	for k < len(wc) && c.n > 0 {
		wc[k] = c.ring[c.head]
		c.ring[c.head] = verbs.WC{}
		c.head = (c.head + 1) % len(c.ring)
		c.n--
		k++
	}
	more := c.n > 0
	c.mu.Unlock()
	if more {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
	return k
}

func (c *cq) Wait(ctx context.Context) error {
	for {
		c.mu.Lock()
		n := c.n
		c.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.closed:
			return verbs.ErrClosed
		}
	}
}

func (c *cq) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}
