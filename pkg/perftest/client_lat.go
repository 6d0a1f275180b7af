package perftest

import (
	"context"
	"fmt"
	"time"
)

// postPong posts the receive for the next pong (the upper half of the
// send_lat data region).
func (c *client) postPong() error {
	size := int(c.opts.Size)
	return c.ep.postRecv(0, size, size)
}

// pingPong sends one ping, waits for the server's pong and returns the
// round-trip time. The pong receive was posted before. With Verify, the
// ping carries the pattern of this round and the pong must echo it. It does
// not allocate.
func (c *client) pingPong(ctx context.Context) (time.Duration, error) {
	size := int(c.opts.Size)
	buf := c.ep.data.Bytes()
	if c.opts.Verify {
		fillPattern(buf[:size], c.iter)
	}
	c.pingDone, c.pongDone = false, false
	c.wr.ID = idData | c.iter&(1<<32-1)
	start := time.Now()
	if err := c.ep.qp.PostSend(&c.wr); err != nil {
		return 0, fmt.Errorf("perftest: posting ping %d: %w", c.iter, err)
	}
	for !c.pingDone || !c.pongDone {
		if err := c.step(ctx); err != nil {
			return 0, err
		}
	}
	rtt := time.Since(start)
	if int(c.pongBytes) != size {
		return 0, fmt.Errorf("%w: pong of %d bytes for a ping of %d", ErrProtocol, c.pongBytes, size)
	}
	if c.opts.Verify {
		pong := buf[size : 2*size]
		if c.opts.corruptSink != nil {
			c.opts.corruptSink(pong)
		}
		if off := checkPattern(pong, c.iter); off >= 0 {
			return 0, verifyError(fmt.Sprintf("client's send_lat pong %d", c.iter), off, size)
		}
		clear(pong)
	}
	c.iter++
	if c.iter < uint64(c.opts.Iters) { // the server leaves after the last pong
		if err := c.postPong(); err != nil {
			return 0, err
		}
	}
	return rtt, nil
}
