package perftest

import (
	"context"
	"fmt"
)

// burst moves n messages of the run's size with opts.Depth requests
// outstanding (and, for send_bw, no more Sends than the server has posted
// receives for) and returns when every one completed locally. It does not
// allocate.
func (c *client) burst(ctx context.Context, n int) error {
	c.posted, c.completed = 0, 0
	depth := c.opts.Depth
	credited := c.opts.Test == SendBW
	for c.completed < n {
		for c.posted < n && c.posted-c.completed < depth && (!credited || c.credits > 0) {
			c.wr.ID = idData | uint64(c.posted)
			if err := c.ep.qp.PostSend(&c.wr); err != nil {
				return fmt.Errorf("perftest: posting %v %d: %w", c.wr.Opcode, c.posted, err)
			}
			c.posted++
			if credited {
				c.credits--
			}
		}
		if err := c.step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// checkSink verifies the read_bw sink after the last RDMA Read completed.
func (c *client) checkSink() error {
	sink := c.ep.data.Bytes()
	if c.opts.corruptSink != nil {
		c.opts.corruptSink(sink)
	}
	if off := checkPattern(sink, 0); off >= 0 {
		return verifyError("client's read_bw sink", off, len(sink))
	}
	return nil
}
