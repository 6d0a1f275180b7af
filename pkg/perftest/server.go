package perftest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// Server is the passive end: it accepts runs and serves each on its own
// queue pair, concurrently. CRC32c follows each client's choice.
type Server struct {
	dev *siw.Device
	ln  verbs.Listener
	wg  sync.WaitGroup

	// corruptSink, for tests, damages a sink just before it is verified.
	corruptSink func([]byte)
	// errs, for tests, receives the outcome of every connection.
	errs chan error
}

// Listen starts a server on addr ("host:port"; port 0 picks one).
func Listen(ctx context.Context, addr string) (*Server, error) {
	dev := newDevice(true, false)
	ln, err := dev.Listen(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("perftest: listening on %s: %w", addr, err)
	}
	return &Server{dev: dev, ln: ln}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve accepts and serves runs until ctx ends or the server is closed,
// then waits for the runs in progress to end (they end with ctx). It
// returns nil when stopped that way.
func (s *Server) Serve(ctx context.Context) error {
	defer s.wg.Wait()
	for {
		cr, err := s.ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, verbs.ErrClosed) {
				return nil
			}
			return fmt.Errorf("perftest: accepting: %w", err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			err := s.serveConn(ctx, cr)
			if err != nil {
				klog.ErrorS(err, "perftest: run failed", "client", cr.RemoteAddr())
			}
			if s.errs != nil {
				s.errs <- err
			}
		}()
	}
}

// Close stops accepting.
func (s *Server) Close() error {
	err := s.ln.Close()
	_ = s.dev.Close()
	return err
}

// serverConn is the passive end of one run.
type serverConn struct {
	ep          *endpoint
	opts        Options
	corruptSink func([]byte)

	done     bool // write_bw, read_bw: the client's done message arrived
	received int  // send_bw: messages received; send_lat: pings received
	badMsg   int  // send_bw: first message that failed verification, -1 if none
	badOff   int  // its first bad byte
	granted  int  // send_bw: receives announced to the client (initial + credits)
	pending  int  // send_bw: receives posted again, not yet announced
	lastRecv int  // send_lat: slot of the latest ping
	sendBusy [2]bool
	ended    bool // the last message is out: the client may disconnect
}

// serveConn checks a connection request, sets up the run, accepts and
// serves it.
func (s *Server) serveConn(ctx context.Context, cr verbs.ConnRequest) error {
	req, err := decodeRequest(cr.PrivateData())
	if err != nil {
		_ = cr.Reject(encodeReject(statusBadParams, err.Error()))
		return err
	}
	opts, err := req.options()
	if err != nil {
		_ = cr.Reject(encodeReject(statusBadParams, err.Error()))
		return err
	}
	size := int(opts.Size)
	sp := endpointSpec{dataLen: size}
	switch opts.Test {
	case WriteBW:
		sp.dataAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	case ReadBW:
		sp.dataAccess = verbs.AccessRemoteRead
	case SendBW:
		sp.recvDepth, sp.dataLen, sp.dataAccess = opts.Depth, opts.Depth*size, verbs.AccessLocalWrite
	case SendLat:
		sp.sendDepth, sp.recvDepth, sp.dataLen, sp.dataAccess = 2, 2, 2*size, verbs.AccessLocalWrite
	}
	ep, err := newEndpoint(s.dev, sp)
	if err != nil {
		_ = cr.Reject(encodeReject(statusNoMemory, err.Error()))
		return err
	}
	defer ep.close()
	sc := &serverConn{ep: ep, opts: opts, corruptSink: s.corruptSink, badMsg: -1}
	if err := sc.prepare(); err != nil {
		_ = cr.Reject(encodeReject(statusNoMemory, err.Error()))
		return err
	}
	rep := reply{rkey: ep.data.RKey(), length: uint32(ep.data.Len()), addr: ep.data.Addr()}
	info, err := cr.Accept(ctx, ep.qp, verbs.ConnParam{PrivateData: rep.encode(), ResponderResources: siw.MaxIRDORD})
	if err != nil {
		return fmt.Errorf("perftest: accepting %s: %w", cr.RemoteAddr(), err)
	}
	klog.V(1).InfoS("perftest: serving", "client", cr.RemoteAddr(), "test", opts.Test, "size", size,
		"iters", opts.Iters, "depth", opts.Depth, "verify", opts.Verify, "conn", info.String())
	switch opts.Test {
	case SendBW:
		return sc.serveSendBW(ctx)
	case SendLat:
		return sc.serveSendLat(ctx)
	}
	return sc.serveOneSided(ctx)
}

// prepare posts the receives the run starts with and fills the read_bw
// source.
func (sc *serverConn) prepare() error {
	size := int(sc.opts.Size)
	switch sc.opts.Test {
	case WriteBW:
		return sc.ep.postCtrlRecvs()
	case ReadBW:
		if sc.opts.Verify {
			fillPattern(sc.ep.data.Bytes(), 0)
		}
		return sc.ep.postCtrlRecvs()
	case SendBW:
		for i := 0; i < sc.opts.Depth; i++ {
			if err := sc.ep.postRecv(i, i*size, size); err != nil {
				return err
			}
		}
		sc.granted = sc.opts.Depth
	case SendLat:
		return sc.ep.postRecv(0, 0, size)
	}
	return nil
}

// step waits for completions and applies them to the run's state.
func (sc *serverConn) step(ctx context.Context) error {
	wcs, err := sc.ep.reap(ctx)
	if err != nil {
		return err
	}
	for i := range wcs {
		wc := &wcs[i]
		if wc.Status != verbs.WCSuccess {
			if !sc.ended || wc.Status != verbs.WCFlushErr {
				return wcError(wc)
			}
			// The client left after our last message; what was flushed
			// behind it is of no consequence.
			switch idKind(wc.ID) {
			case idData:
				sc.sendBusy[idIndex(wc.ID)&1] = false
			case idCtrlSend:
				sc.ep.ctrlSent(wc)
			}
			continue
		}
		switch idKind(wc.ID) {
		case idData: // send_lat: a pong went out
			sc.sendBusy[idIndex(wc.ID)&1] = false
		case idDataRecv:
			if err := sc.onDataRecv(wc.ID, wc.ByteLen); err != nil {
				return err
			}
		case idCtrlSend:
			sc.ep.ctrlSent(wc)
		case idCtrlRecv:
			m, err := sc.ep.ctrlRecv(wc)
			if err != nil {
				return err
			}
			if m.kind != ctrlDone {
				return fmt.Errorf("%w: control message %d sent to the server", ErrProtocol, m.kind)
			}
			sc.done = true
		default:
			return fmt.Errorf("%w: completion with unknown id %#x", ErrProtocol, wc.ID)
		}
	}
	return nil
}

func (sc *serverConn) onDataRecv(id uint64, n uint32) error {
	if int(n) != int(sc.opts.Size) {
		return fmt.Errorf("%w: message of %d bytes in a %d-byte run", ErrProtocol, n, sc.opts.Size)
	}
	sc.received++
	if sc.opts.Test == SendLat {
		sc.lastRecv = idIndex(id) & 1
		return nil
	}
	return sc.recvSendBW(idIndex(id))
}

// sendCtrl sends m, first waiting for a free control slot.
func (sc *serverConn) sendCtrl(ctx context.Context, m ctrlMsg) error {
	for {
		ok, err := sc.ep.trySendCtrl(m)
		if ok || err != nil {
			return err
		}
		if err := sc.step(ctx); err != nil {
			return err
		}
	}
}

// conclude acknowledges the end of the data phase, sends the verdict and
// waits until both went out.
func (sc *serverConn) conclude(ctx context.Context, verify func() int) error {
	if err := sc.sendCtrl(ctx, ctrlMsg{kind: ctrlAck}); err != nil {
		return err
	}
	v := ctrlMsg{kind: ctrlVerdict, value: verdictOK}
	if verify != nil {
		if off := verify(); off >= 0 {
			v.value, v.arg = verdictMismatch, uint64(off)
		}
	}
	sc.ended = true // the client may leave as soon as it has the verdict
	if err := sc.sendCtrl(ctx, v); err != nil {
		return err
	}
	for !sc.ep.ctrlIdle() {
		if err := sc.step(ctx); err != nil {
			return err
		}
	}
	if v.value != verdictOK {
		return verifyError(fmt.Sprintf("server's %v sink", sc.opts.Test), int(v.arg), int(sc.opts.Size))
	}
	return nil
}

// serveOneSided serves write_bw and read_bw: the client moves the data on
// its own; the server waits for the done message, acknowledges it and, for
// write_bw with Verify, checks what was written.
func (sc *serverConn) serveOneSided(ctx context.Context) error {
	for !sc.done {
		if err := sc.step(ctx); err != nil {
			return err
		}
	}
	var verify func() int
	if sc.opts.Test == WriteBW && sc.opts.Verify {
		verify = func() int {
			sink := sc.ep.data.Bytes()
			if sc.corruptSink != nil {
				sc.corruptSink(sink)
			}
			return checkPattern(sink, 0)
		}
	}
	return sc.conclude(ctx, verify)
}
