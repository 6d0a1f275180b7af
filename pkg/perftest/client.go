package perftest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// client is the active end of one run.
type client struct {
	dev    verbs.Device
	ep     *endpoint
	opts   Options
	remote reply
	info   verbs.ConnInfo

	wr  verbs.SendWR // the data request, posted again and again
	sgl [1]verbs.SGE

	posted, completed int // data requests of the current burst
	credits           int // send_bw: receives the server has posted for us

	acked   bool      // the server acknowledged the end of the data phase
	ackAt   time.Time // when the acknowledgement arrived
	verdict ctrlMsg   // the server's verdict on the data it received
	judged  bool      // the verdict arrived
	ended   bool      // the server sent its last message: flushed work is expected

	// send_lat
	iter      uint64
	pingDone  bool
	pongDone  bool
	pongBytes uint32
}

// dial connects to the perftest server at addr for a run of opts (whose
// defaults are filled) and sets up the data path.
func dial(ctx context.Context, addr string, opts Options) (_ *client, err error) {
	c := &client{dev: newDevice(opts.NoCRC, opts.FPDUPathMSS), opts: opts}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	size := int(opts.Size)
	sp := endpointSpec{sendDepth: opts.Depth, dataLen: size}
	switch opts.Test {
	case ReadBW:
		sp.dataAccess = verbs.AccessLocalWrite
	case SendLat:
		sp.sendDepth, sp.recvDepth, sp.dataLen, sp.dataAccess = 1, 1, 2*size, verbs.AccessLocalWrite
	}
	if c.ep, err = newEndpoint(c.dev, sp); err != nil {
		return nil, err
	}
	if opts.Test == SendLat {
		if err := c.postPong(); err != nil {
			return nil, err
		}
	} else if err := c.ep.postCtrlRecvs(); err != nil {
		return nil, err
	}
	if opts.Verify && opts.Test != ReadBW && opts.Test != SendLat {
		fillPattern(c.ep.data.Bytes(), 0)
	}
	req := request{test: opts.Test, verify: opts.Verify, size: uint32(size), iters: uint32(opts.Iters), depth: uint32(opts.Depth)}
	p := verbs.ConnParam{PrivateData: req.encode()}
	if opts.Test == ReadBW {
		p.InitiatorDepth = opts.Depth
	}
	c.info, err = c.dev.Connect(ctx, addr, c.ep.qp, p)
	if err != nil {
		var rej *verbs.RejectError
		if errors.As(err, &rej) {
			if reason := rejectReason(rej.PrivateData); reason != "" {
				return nil, fmt.Errorf("perftest: server refused the run: %s: %w", reason, err)
			}
		}
		return nil, fmt.Errorf("perftest: connecting to %s: %w", addr, err)
	}
	if c.remote, err = decodeReply(c.info.PrivateData); err != nil {
		return nil, err
	}
	if opts.Test == ReadBW && c.info.ORD == 0 {
		return nil, fmt.Errorf("perftest: read_bw: the server allows no RDMA Reads (ORD 0)")
	}
	if (opts.Test == WriteBW || opts.Test == ReadBW) && c.remote.length < uint32(size) {
		return nil, fmt.Errorf("%w: server buffer of %d bytes for %d-byte messages", ErrProtocol, c.remote.length, size)
	}
	klog.V(1).InfoS("perftest: connected", "server", addr, "test", opts.Test, "conn", c.info.String())

	c.credits = opts.Depth
	c.wr = verbs.SendWR{Flags: verbs.SendSignaled, SGL: c.sgl[:]}
	c.sgl[0] = c.ep.data.SGE(0, size)
	switch opts.Test {
	case WriteBW:
		c.wr.Opcode, c.wr.RKey, c.wr.RemoteAddr = verbs.WRRDMAWrite, c.remote.rkey, c.remote.addr
	case ReadBW:
		c.wr.Opcode, c.wr.RKey, c.wr.RemoteAddr = verbs.WRRDMARead, c.remote.rkey, c.remote.addr
	default:
		c.wr.Opcode = verbs.WRSend
	}
	return c, nil
}

// hangupGrace bounds the wait for the server to disconnect after a run.
const hangupGrace = 2 * time.Second

// awaitHangup waits for the server to disconnect, which it does once its
// last message (the verdict, the last pong) completed. The side whose
// message is last closes first: closing while the peer's transmit path is
// still finishing that message would flush it under the peer's feet.
func (c *client) awaitHangup(ctx context.Context) {
	c.ended = true
	t := time.NewTimer(hangupGrace)
	defer t.Stop()
	select {
	case <-c.ep.qp.Done():
	case <-t.C:
	case <-ctx.Done():
	}
}

func (c *client) close() {
	if c.ep != nil {
		c.ep.close()
	}
	_ = c.dev.Close()
}

// step waits for completions and applies them to the client's state.
func (c *client) step(ctx context.Context) error {
	wcs, err := c.ep.reap(ctx)
	if err != nil {
		return err
	}
	for i := range wcs {
		wc := &wcs[i]
		if wc.Status != verbs.WCSuccess {
			if wc.Status != verbs.WCFlushErr || !c.ended && !(c.pongDone && idKind(wc.ID) == idData) {
				return wcError(wc)
			}
			// The server leaves after its last message (verdict, pong),
			// which proves that everything we sent before arrived: a
			// Send flushed by that disconnect (before the provider
			// completed it) was delivered. Flushed receives are unused.
			switch idKind(wc.ID) {
			case idCtrlSend:
				c.ep.ctrlSent(wc)
			case idData:
				c.completed++
				c.pingDone = true
			}
			continue
		}
		switch idKind(wc.ID) {
		case idData:
			c.completed++
			if c.opts.Test == SendLat {
				c.pingDone = true
			}
		case idDataRecv:
			c.pongDone, c.pongBytes = true, wc.ByteLen
		case idCtrlSend:
			c.ep.ctrlSent(wc)
		case idCtrlRecv:
			m, err := c.ep.ctrlRecv(wc)
			if err != nil {
				return err
			}
			if err := c.onCtrl(m); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: completion with unknown id %#x", ErrProtocol, wc.ID)
		}
	}
	return nil
}

func (c *client) onCtrl(m ctrlMsg) error {
	switch m.kind {
	case ctrlCredit:
		c.credits += int(m.value)
	case ctrlAck:
		c.acked, c.ackAt = true, time.Now()
	case ctrlVerdict:
		c.verdict, c.judged, c.ended = m, true, true
	default:
		return fmt.Errorf("%w: control message %d sent to the client", ErrProtocol, m.kind)
	}
	return nil
}

// finish ends a bandwidth run: for write_bw and read_bw it tells the server
// the data phase is over; then it waits for the server's acknowledgement
// (the end of the measured phase) and its verdict on the data.
func (c *client) finish(ctx context.Context) error {
	if c.opts.Test == WriteBW || c.opts.Test == ReadBW {
		for {
			ok, err := c.ep.trySendCtrl(ctrlMsg{kind: ctrlDone})
			if err != nil {
				return err
			}
			if ok {
				break
			}
			if err := c.step(ctx); err != nil {
				return err
			}
		}
	}
	for !c.judged || !c.ep.ctrlIdle() {
		if err := c.step(ctx); err != nil {
			return err
		}
	}
	c.awaitHangup(ctx)
	if c.verdict.value != verdictOK {
		return verifyError("server's sink", int(c.verdict.arg), int(c.opts.Size))
	}
	return nil
}
