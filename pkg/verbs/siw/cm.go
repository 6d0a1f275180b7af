package siw

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// rxBufSize is the socket read buffer of a connection: headers and small
// messages are read through it; tagged and untagged payloads beyond what it
// already holds are read from the socket straight into their destination.
// While the stream carries large payloads only its first rxBulkTail bytes
// are filled by a read (sockReader).
const rxBufSize = 32 << 10

// tune sets TCP options as Linux siw does (Nagle off) plus liveness:
// keepalive and TCP_USER_TIMEOUT, so a dead peer or one that stops reading
// fails the connection instead of hanging it.
func (d *Device) tune(c *net.TCPConn) {
	_ = c.SetNoDelay(true)
	_ = c.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: d.cfg.KeepAlive, Interval: d.cfg.KeepAlive / 3, Count: 3})
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.cfg.UserTimeout/time.Millisecond))
		})
	}
}

func clampIRDORD(v int) int { return max(0, min(v, MaxIRDORD)) }

// handshakeDeadline arms the connection's deadline for the MPA exchange and
// closes it if ctx ends first. The returned stop function disarms both.
func (d *Device) handshakeDeadline(ctx context.Context, c net.Conn) func() {
	dl := time.Now().Add(d.cfg.HandshakeTimeout)
	if t, ok := ctx.Deadline(); ok && t.Before(dl) {
		dl = t
	}
	_ = c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		_ = c.SetDeadline(time.Time{})
	}
}

func wrapTimeout(err error, what string) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %s", verbs.ErrTimeout, what)
	}
	return err
}

// Connect is the active side: TCP connect, MPA request, MPA reply, and in
// peer-to-peer mode the RTR, after which qp is RTS (RFC 5044 section 7.1,
// RFC 6581 section 3).
func (d *Device) Connect(ctx context.Context, addr string, vqp verbs.QP, p verbs.ConnParam) (verbs.ConnInfo, error) {
	q, ok := vqp.(*qp)
	if !ok || q.dev != d {
		return verbs.ConnInfo{}, fmt.Errorf("%w: QP of another device", verbs.ErrInvalidWR)
	}
	if len(p.PrivateData) > verbs.MaxPrivateData {
		return verbs.ConnInfo{}, fmt.Errorf("%w: %d bytes of private data", ErrMPAPrivData, len(p.PrivateData))
	}
	if err := q.claim(); err != nil {
		return verbs.ConnInfo{}, err
	}
	dialer := net.Dialer{Timeout: d.cfg.HandshakeTimeout, KeepAlive: -1}
	nc, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		q.fail(fmt.Errorf("%w: %v", verbs.ErrDisconnect, err))
		return verbs.ConnInfo{}, err
	}
	c := nc.(*net.TCPConn)
	d.tune(c)
	stop := d.handshakeDeadline(ctx, c)
	defer stop()

	ird, ord := clampIRDORD(p.ResponderResources), clampIRDORD(p.InitiatorDepth)
	req := mpaFrame{rev: 2, enhanced: true, crc: !d.cfg.NoCRC, markers: d.cfg.Markers,
		ird: uint16(ird), ord: uint16(ord), priv: p.PrivateData}
	if d.cfg.Revision1 {
		req.rev, req.enhanced = 1, false
	} else if !d.cfg.NoP2P {
		req.p2p = true
		if d.cfg.ReadRTR && ord > 0 {
			req.rtrRead = true
		} else {
			req.rtrWrite = true
		}
	}
	buf, err := req.encode(nil)
	if err == nil {
		_, err = c.Write(buf)
	}
	br := bufio.NewReaderSize(c, rxBufSize)
	var rep mpaFrame
	if err == nil {
		err = readMPAFrame(br, true, &rep)
	}
	if err != nil {
		_ = c.Close()
		err = wrapTimeout(err, "waiting for the MPA reply")
		q.fail(err)
		return verbs.ConnInfo{}, err
	}
	if rep.reject {
		_ = c.Close()
		err := &verbs.RejectError{PrivateData: rep.priv, Reason: fmt.Sprintf("MPA reply with R=1 (revision %d)", rep.rev)}
		q.fail(err)
		return verbs.ConnInfo{}, err
	}
	if rep.rev > req.rev || (req.crc && !rep.crc) {
		_ = c.Close()
		err := fmt.Errorf("%w: MPA reply revision %d, CRC %v to a request of revision %d, CRC %v", verbs.ErrProtocol, rep.rev, rep.crc, req.rev, req.crc)
		q.fail(err)
		return verbs.ConnInfo{}, err
	}
	rtr := false
	if rep.enhanced {
		ord = min(ord, int(rep.ird))
		rtr = req.p2p && rep.p2p
		if rtr && !(rep.rtrWrite && req.rtrWrite || rep.rtrRead && req.rtrRead && ord > 0) {
			_ = c.Close()
			err := fmt.Errorf("%w: peer chose an RTR other than the one offered", verbs.ErrProtocol)
			q.fail(err)
			return verbs.ConnInfo{}, err
		}
	}
	if err := q.attach(c, br, rep.crc, rep.markers, req.markers, ird, ord, false); err != nil {
		return verbs.ConnInfo{}, err
	}
	if rtr {
		if d.cfg.RTRDelay > 0 {
			t := time.NewTimer(d.cfg.RTRDelay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				q.fail(ctx.Err())
				return verbs.ConnInfo{}, ctx.Err()
			}
		}
		if err := q.sendRTR(rep.rtrRead); err != nil {
			return verbs.ConnInfo{}, err
		}
	}
	q.ready(false)
	return verbs.ConnInfo{PrivateData: rep.priv, IRD: ird, ORD: ord, MPA: q.mpaInfo(rep.rev, rtr, rep.rtrRead)}, nil
}

// claim moves a fresh QP out of reach of a second Connect/Accept.
func (q *qp) claim() error {
	q.stateMu.Lock()
	defer q.stateMu.Unlock()
	if q.State() != verbs.QPInit || q.attached {
		return fmt.Errorf("%w: QP %d already connected or failed", verbs.ErrQPState, q.num)
	}
	q.attached = true
	return nil
}

// attach binds the connection after the MPA exchange and starts the
// receive and transmit goroutines.
func (q *qp) attach(c *net.TCPConn, br *bufio.Reader, crcOn, txMark, rxMark bool, ird, ord int, rtrWant bool) error {
	q.stateMu.Lock()
	if q.State() == verbs.QPError {
		err := q.err
		q.stateMu.Unlock()
		_ = c.Close()
		return err
	}
	q.conn = c
	q.stateMu.Unlock()
	n := br.Buffered()
	pending, _ := br.Peek(n) // the peer's first FPDUs, if read with the MPA frame
	sr, err := newSockReader(c, pending)
	if err != nil {
		q.fail(err)
		_ = c.Close()
		return err
	}
	q.local, q.remote = c.LocalAddr(), c.RemoteAddr()
	q.crcOn, q.txMark, q.rxMark = crcOn, txMark, rxMark
	q.ird, q.ord = ird, ord
	q.irq = make([]inboundRead, max(ird, 1))
	q.orq = make([]int, max(ord, 1))
	// The largest ULPDU we send: Config.MaxULPDU when set (larger than
	// the path allows only between peers known to take it, such as two
	// ends of this stack), else the MULPDU of the connection's MSS (RFC
	// 5044 section 4.5; 1460 bytes if the socket does not say), which the
	// transmit path then follows (refreshULPDU).
	q.tx.ulpdu = q.dev.cfg.MaxULPDU
	if q.tx.ulpdu == 0 {
		q.tx.ulpdu = mulpdu(1460, txMark)
		q.tx.rc, q.tx.sinceMSS = sr.rc, mssRecheck // the first multi-FPDU message reads it again
		q.tx.mssFn = func(fd uintptr) {
			q.tx.mss, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG)
		}
		q.readMSS()
	}
	q.ulpdu = q.tx.ulpdu
	q.rx.r = fpduReader{src: sr, markers: rxMark, crcOn: crcOn}
	q.rx.rtrWant = rtrWant
	q.tx.fw = newFPDUWriter(c, crcOn, txMark, q.maxSGE+1)
	q.tx.segs = make([][]byte, 0, q.maxSGE)
	go q.rxLoop()
	go q.txLoop()
	return nil
}

// ready makes the QP RTS. On the passive side sending waits for the RTR
// (waitRTR), which the receive path signals.
func (q *qp) ready(waitRTR bool) {
	q.stateMu.Lock()
	if q.State() == verbs.QPInit {
		q.state.Store(uint32(verbs.QPRTS))
	}
	q.stateMu.Unlock()
	if !waitRTR {
		q.txReady.Store(true)
	}
	q.wakeTx()
}

// mpaInfo reports what the MPA exchange negotiated.
func (q *qp) mpaInfo(rev uint8, rtr, read bool) *verbs.MPAInfo {
	m := &verbs.MPAInfo{Revision: int(rev), CRC: q.crcOn, MarkersTx: q.txMark, MarkersRx: q.rxMark, ULPDU: q.ulpdu}
	if rtr {
		m.RTR = verbs.RTRWrite
		if read {
			m.RTR = verbs.RTRRead
		}
	}
	return m
}

// listener accepts TCP connections and reads their MPA requests
// concurrently, so a slow or silent client holds up no one else.
type listener struct {
	dev    *Device
	ln     net.Listener
	reqs   chan *connRequest
	closed chan struct{}
	once   sync.Once
}

// Listen accepts connections on addr ("host:port"; port 0 picks one).
func (d *Device) Listen(ctx context.Context, addr string) (verbs.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &listener{dev: d, ln: ln, reqs: make(chan *connRequest, 16), closed: make(chan struct{})}
	go l.acceptLoop()
	return l, nil
}

func (l *listener) acceptLoop() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return
		}
		go l.handshake(c.(*net.TCPConn))
	}
}

// handshake reads one MPA request. A frame that is not an MPA request is
// dropped by closing; an unsupported revision gets a reject reply.
func (l *listener) handshake(c *net.TCPConn) {
	l.dev.tune(c)
	_ = c.SetDeadline(time.Now().Add(l.dev.cfg.HandshakeTimeout))
	br := bufio.NewReaderSize(c, rxBufSize)
	cr := &connRequest{dev: l.dev, conn: c, br: br}
	if err := readMPAFrame(br, false, &cr.req); err != nil {
		if errors.Is(err, ErrMPARevision) {
			rej := mpaFrame{reply: true, reject: true, rev: 2}
			if b, e := rej.encode(nil); e == nil {
				_, _ = c.Write(b)
			}
		}
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	select {
	case l.reqs <- cr:
	case <-l.closed:
		_ = c.Close()
	}
}

func (l *listener) Accept(ctx context.Context) (verbs.ConnRequest, error) {
	select {
	case cr := <-l.reqs:
		return cr, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.closed:
		return nil, verbs.ErrClosed
	}
}

func (l *listener) Addr() net.Addr { return l.ln.Addr() }

func (l *listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	err := l.ln.Close()
	for {
		select {
		case cr := <-l.reqs:
			_ = cr.conn.Close()
		default:
			return err
		}
	}
}

// connRequest is a received MPA request waiting for Accept or Reject.
type connRequest struct {
	dev  *Device
	conn *net.TCPConn
	br   *bufio.Reader
	req  mpaFrame
	used bool
}

func (cr *connRequest) PrivateData() []byte  { return cr.req.priv }
func (cr *connRequest) RemoteAddr() net.Addr { return cr.conn.RemoteAddr() }
func (cr *connRequest) Param() verbs.ConnParam {
	return verbs.ConnParam{PrivateData: cr.req.priv, ResponderResources: int(cr.req.ird), InitiatorDepth: int(cr.req.ord)}
}

// Accept answers the MPA request and, in peer-to-peer mode, waits for the
// RTR before returning. IRD/ORD are negotiated as Linux siw does with
// relaxed negotiation: our ORD is at most the initiator's IRD, our IRD at
// least its ORD (RFC 6581 section 3).
func (cr *connRequest) Accept(ctx context.Context, vqp verbs.QP, p verbs.ConnParam) (verbs.ConnInfo, error) {
	q, ok := vqp.(*qp)
	if !ok || q.dev != cr.dev {
		return verbs.ConnInfo{}, fmt.Errorf("%w: QP of another device", verbs.ErrInvalidWR)
	}
	if cr.used {
		return verbs.ConnInfo{}, fmt.Errorf("%w: request already answered", verbs.ErrInvalidWR)
	}
	if len(p.PrivateData) > verbs.MaxPrivateData {
		return verbs.ConnInfo{}, fmt.Errorf("%w: %d bytes of private data", ErrMPAPrivData, len(p.PrivateData))
	}
	if err := q.claim(); err != nil {
		return verbs.ConnInfo{}, err
	}
	cr.used = true
	d := cr.dev
	r := &cr.req
	ird, ord := clampIRDORD(p.ResponderResources), clampIRDORD(p.InitiatorDepth)
	rep := mpaFrame{reply: true, rev: r.rev, crc: r.crc || !d.cfg.NoCRC, markers: d.cfg.Markers, priv: p.PrivateData}
	rtr, rtrRead := false, false
	if r.enhanced {
		ord = min(ord, int(r.ird))
		ird = max(ird, clampIRDORD(int(r.ord)))
		rep.enhanced = true
		rep.ird, rep.ord = uint16(ird), uint16(ord)
		if r.p2p {
			switch {
			case r.rtrWrite:
				rep.p2p, rep.rtrWrite, rtr = true, true, true
			case r.rtrRead:
				rep.p2p, rep.rtrRead, rtr, rtrRead = true, true, true, true
			}
		}
	}
	buf, err := rep.encode(nil)
	if err == nil {
		_, err = cr.conn.Write(buf)
	}
	if err != nil {
		_ = cr.conn.Close()
		q.fail(fmt.Errorf("%w: sending the MPA reply: %v", verbs.ErrDisconnect, err))
		return verbs.ConnInfo{}, err
	}
	q.rtrRead = rtrRead
	if err := q.attach(cr.conn, cr.br, rep.crc, r.markers, rep.markers, ird, ord, rtr); err != nil {
		return verbs.ConnInfo{}, err
	}
	q.ready(rtr)
	if rtr {
		t := time.NewTimer(d.cfg.HandshakeTimeout)
		defer t.Stop()
		select {
		case <-q.rtrCh:
		case <-q.done:
			return verbs.ConnInfo{}, q.Err()
		case <-t.C:
			err := fmt.Errorf("%w: no RTR from the peer", verbs.ErrTimeout)
			q.fail(err)
			return verbs.ConnInfo{}, err
		case <-ctx.Done():
			q.fail(ctx.Err())
			return verbs.ConnInfo{}, ctx.Err()
		}
	}
	return verbs.ConnInfo{PrivateData: r.priv, IRD: ird, ORD: ord, MPA: q.mpaInfo(r.rev, rtr, rtrRead)}, nil
}

// Reject sends an MPA reply with the reject bit and closes the connection.
func (cr *connRequest) Reject(privateData []byte) error {
	if cr.used {
		return fmt.Errorf("%w: request already answered", verbs.ErrInvalidWR)
	}
	cr.used = true
	rep := mpaFrame{reply: true, reject: true, rev: cr.req.rev, enhanced: cr.req.enhanced, priv: privateData}
	buf, err := rep.encode(nil)
	if err == nil {
		_, err = cr.conn.Write(buf)
	}
	_ = cr.conn.CloseWrite()
	time.AfterFunc(closeLinger, func() { _ = cr.conn.Close() })
	return err
}
