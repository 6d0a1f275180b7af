package perftest

import (
	"context"
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// serveSendLat serves send_lat: each ping's receive completion triggers a
// Send back of the same bytes (the pong) from the buffer it landed in. Two
// buffers alternate: the next ping's receive is posted on the other one,
// once the pong sent from it earlier completed, before this pong goes out.
func (sc *serverConn) serveSendLat(ctx context.Context) error {
	size := int(sc.opts.Size)
	var sgl [1]verbs.SGE
	wr := verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sgl[:]}
	for sc.received < sc.opts.Iters {
		before := sc.received
		for sc.received == before {
			if err := sc.step(ctx); err != nil {
				return err
			}
		}
		k := sc.lastRecv
		other := k ^ 1
		for sc.sendBusy[other] {
			if err := sc.step(ctx); err != nil {
				return err
			}
		}
		last := sc.received == sc.opts.Iters
		if !last {
			if err := sc.ep.postRecv(other, other*size, size); err != nil {
				return err
			}
		}
		wr.ID = idData | uint64(k)
		sgl[0] = sc.ep.data.SGE(k*size, size)
		sc.ended = last // the client may leave as soon as it has the last pong
		if err := sc.ep.qp.PostSend(&wr); err != nil {
			return fmt.Errorf("perftest: posting pong %d: %w", sc.received, err)
		}
		sc.sendBusy[k] = true
	}
	for sc.sendBusy[0] || sc.sendBusy[1] {
		if err := sc.step(ctx); err != nil {
			return err
		}
	}
	return nil
}
