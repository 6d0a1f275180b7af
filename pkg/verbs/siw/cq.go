package siw

import (
	"context"
	"sync"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// cq is a completion queue: a fixed ring of completions, a notification
// channel for waiters, no polling loop.
type cq struct {
	mu      sync.Mutex
	ring    []verbs.WC
	head, n int
	notify  chan struct{} // capacity 1: "something arrived"
	closed  chan struct{}
	once    sync.Once
}

func newCQ(depth int) *cq {
	return &cq{ring: make([]verbs.WC, depth), notify: make(chan struct{}, 1), closed: make(chan struct{})}
}

// push adds a completion; it reports false when the ring is full (CQ
// overrun: the QP that produced it goes to error).
func (c *cq) push(wc *verbs.WC) bool {
	c.mu.Lock()
	if c.n == len(c.ring) {
		c.mu.Unlock()
		return false
	}
	c.ring[(c.head+c.n)%len(c.ring)] = *wc
	c.n++
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
	return true
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
