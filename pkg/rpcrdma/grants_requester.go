package rpcrdma

import (
	"context"
	"fmt"
)

// The requester's credit accounting (RFC 8166 section 3.3.1; version 2:
// the draft's section 4.2.1): the window the responder's grants allow,
// and the calls waiting for a slot and a credit, first come first served.

type creditWaiter struct {
	ch   chan struct{}
	slot int // granted slot, or -1
}

// grant applies a responder's rdma_credit. Version 1: a grant of 0 counts
// as 1 (as Linux xprtrdma, rpcrdma_update_cwnd), capped at Credits.
// Version 2: the credit is the responder's limit on our Sends counted
// since the connection began (the draft's section 4.2.1); the window is
// what it leaves plus the calls outstanding, capped at Credits.
func (c *Client) grant(g uint32) {
	c.mu.Lock()
	if c.vers == Version2 {
		// The window: Sends left plus the calls awaiting their reply.
		c.limit = g
		w := max(int(int32(g-c.sent))+len(c.byXID), 0)
		c.window = min(w, c.opts.Credits)
		c.m.creditsGranted.Store(uint64(w))
	} else {
		c.window = int(min(max(g, 1), uint32(c.opts.Credits)))
		c.m.creditsGranted.Store(uint64(g))
	}
	c.wakeLocked()
	c.mu.Unlock()
	c.flushDones()
}

// canTakeLocked tells whether a call may take a slot now: a free one and
// a credit (version 1: fewer outstanding than the window; version 2: a
// Send under the responder's limit).
func (c *Client) canTakeLocked() bool {
	if len(c.free) == 0 || c.inUse >= c.opts.Credits || len(c.dq.pending) > 0 {
		return false
	}
	if c.vers == Version2 {
		return int32(c.limit-c.sent) > 0
	}
	return c.inUse < c.window
}

// wakeLocked hands free slots to waiters while the window allows.
func (c *Client) wakeLocked() {
	for len(c.waiters) > 0 && c.canTakeLocked() {
		w := c.waiters[0]
		copy(c.waiters, c.waiters[1:])
		c.waiters[len(c.waiters)-1] = nil
		c.waiters = c.waiters[:len(c.waiters)-1]
		w.slot = c.takeLocked()
		close(w.ch)
	}
}

func (c *Client) takeLocked() int {
	i := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	c.inUse++
	if c.vers == Version2 {
		c.sent++ // the call's Send; given back by unsend if it is not posted
	}
	c.m.creditsInUse.Add(1)
	c.slots[i].state = slotBusy
	return i
}

func (c *Client) putSlotLocked(i int) {
	if c.freed {
		c.slots[i].deregOwned()
	}
	c.free = append(c.free, i)
	c.inUse--
	c.m.creditsInUse.Add(-1)
	if c.freed && c.inUse == 0 {
		c.deregPoolsLocked()
	}
	c.wakeLocked()
}

// acquire waits for a credit (ctx-aware, FIFO, no spinning).
func (c *Client) acquire(ctx context.Context) (int, error) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return -1, c.err
	}
	if len(c.waiters) == 0 && c.canTakeLocked() {
		i := c.takeLocked()
		c.mu.Unlock()
		return i, nil
	}
	w := &creditWaiter{ch: make(chan struct{}), slot: -1}
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	select {
	case <-w.ch:
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.slot >= 0 {
		if ctx.Err() == nil {
			return w.slot, nil
		}
		c.slots[w.slot].state = slotFree
		c.unsendLocked()
		c.putSlotLocked(w.slot)
	} else {
		for i, x := range c.waiters {
			if x == w {
				c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
				break
			}
		}
	}
	if c.dead {
		return -1, c.err
	}
	return -1, fmt.Errorf("rpcrdma: waiting for a credit: %w", ctx.Err())
}
