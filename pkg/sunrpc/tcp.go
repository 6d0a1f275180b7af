package sunrpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// TCPOptions configures the TCP transport, client and server side. The
// zero value is usable.
type TCPOptions struct {
	// MaxRecordSize bounds, in bytes, every record read (RFC 5531 section
	// 11) and every reply the server writes. A larger incoming record closes
	// the connection with ErrRecordTooLarge; a larger reply is replaced by
	// SYSTEM_ERR. 0 means DefaultMaxRecordSize.
	MaxRecordSize int
	// MaxConcurrent bounds the calls one server connection runs at once;
	// past it the server stops reading the connection. 0 means 128.
	MaxConcurrent int
	// Logger receives connection-level events. nil means slog.Default().
	Logger *slog.Logger
}

const readBufferSize = 32 << 10

func (o *TCPOptions) maxRecord() int {
	if o.MaxRecordSize <= 0 {
		return DefaultMaxRecordSize
	}
	return min(o.MaxRecordSize, maxFragmentLen)
}

func (o *TCPOptions) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.Default()
	}
	return o.Logger
}

func setNoDelay(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true) // keep Nagle off, as the DESIGN send path says
	}
}

// DialTCP connects to addr ("host:port") and returns a client transport
// speaking record-marked RPC over it (RFC 5531 section 11). ctx bounds the dial.
func DialTCP(ctx context.Context, addr string, opts TCPOptions) (ClientTransport, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sunrpc: dial tcp %s: %w", addr, err)
	}
	return NewTCPTransport(c, opts), nil
}

// TCPDialer returns a DialFunc that calls DialTCP(ctx, addr, opts).
func TCPDialer(addr string, opts TCPOptions) DialFunc {
	return func(ctx context.Context) (ClientTransport, error) { return DialTCP(ctx, addr, opts) }
}

// NewTCPTransport returns a client transport over an established stream
// connection and starts its reader goroutine; Close stops it. Replies are
// matched to calls by XID and may arrive in any order. Placed is always -1:
// TCP returns a DDP-eligible result inline.
func NewTCPTransport(conn net.Conn, opts TCPOptions) ClientTransport {
	setNoDelay(conn)
	t := &tcpTransport{
		conn:       conn,
		rr:         recordReader{r: bufio.NewReaderSize(conn, readBufferSize), max: opts.maxRecord()},
		w:          recordWriter{conn: conn},
		wsem:       make(chan struct{}, 1),
		pending:    make(map[uint32]*waiter),
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
		log:        opts.logger(),
	}
	go t.readLoop()
	return t
}

type tcpTransport struct {
	conn net.Conn
	rr   recordReader // owned by readLoop
	w    recordWriter // guarded by wsem
	wsem chan struct{}
	wdl  time.Time // write deadline set on conn; guarded by wsem
	log  *slog.Logger

	mu      sync.Mutex
	pending map[uint32]*waiter
	err     error // why the connection died; wraps ErrConnLost

	done       chan struct{} // closed with err set
	readerDone chan struct{}
}

// waiter is where readLoop delivers the reply of one registered XID.
type waiter struct{ ch chan *Reply }

var (
	waiterPool = sync.Pool{New: func() any { return &waiter{ch: make(chan *Reply, 1)} }}
	replyPool  = sync.Pool{New: func() any { return new(Reply) }}
)

// ReleaseReply implements Releaser: the reply and its buffer are recycled.
func (t *tcpTransport) ReleaseReply(r *Reply) {
	r.Body = r.Body[:0]
	r.Placed = 0
	replyPool.Put(r)
}

func (t *tcpTransport) Done() <-chan struct{} { return t.done }

// Close closes the connection and waits for the reader to stop.
// Outstanding RoundTrips return ErrConnLost wrapping ErrClosed.
func (t *tcpTransport) Close() error {
	t.fail(ErrClosed)
	<-t.readerDone
	return nil
}

func (t *tcpTransport) fail(cause error) {
	t.mu.Lock()
	if t.err == nil {
		t.err = fmt.Errorf("%w: tcp %v: %w", ErrConnLost, t.conn.RemoteAddr(), cause)
		close(t.done)
	}
	t.mu.Unlock()
	t.conn.Close()
}

func (t *tcpTransport) deadErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

func (t *tcpTransport) readLoop() {
	defer close(t.readerDone)
	for {
		r := replyPool.Get().(*Reply)
		body, err := t.rr.readRecord(r.Body)
		r.Body = body
		if err != nil {
			t.ReleaseReply(r)
			if errors.Is(err, ErrRecordTooLarge) || errors.Is(err, ErrMalformed) {
				t.log.Warn("sunrpc: closing tcp connection", "peer", t.conn.RemoteAddr(), "err", err)
			}
			t.fail(err)
			return
		}
		// RFC 5531 section 9: xid then msg_type. Anything that is not a
		// reply (e.g. a backchannel call) is not ours: drop it.
		if len(body) < 8 || MsgType(binary.BigEndian.Uint32(body[4:])) != MsgReply {
			t.ReleaseReply(r)
			continue
		}
		xid := binary.BigEndian.Uint32(body)
		t.mu.Lock()
		w := t.pending[xid]
		if w != nil {
			delete(t.pending, xid)
		}
		t.mu.Unlock()
		if w == nil { // caller gave up, or a duplicate reply
			t.ReleaseReply(r)
			continue
		}
		r.Placed = -1
		r.Owner = t
		w.ch <- r // buffered: one reply per registration
	}
}

// RoundTrip implements ClientTransport. ctx's deadline also bounds the write.
func (t *tcpTransport) RoundTrip(ctx context.Context, c *Call) (*Reply, error) {
	w := waiterPool.Get().(*waiter)
	t.mu.Lock()
	if err := t.err; err != nil {
		t.mu.Unlock()
		waiterPool.Put(w)
		return nil, err
	}
	if _, dup := t.pending[c.XID]; dup {
		t.mu.Unlock()
		waiterPool.Put(w)
		return nil, fmt.Errorf("%w: xid %#x", ErrDuplicateXID, c.XID)
	}
	t.pending[c.XID] = w
	t.mu.Unlock()

	if err := t.send(ctx, c); err != nil {
		if r := t.abandon(c.XID, w); r != nil {
			return r, nil
		}
		return nil, err
	}
	select {
	case r := <-w.ch:
		waiterPool.Put(w)
		return r, nil
	case <-ctx.Done():
		if r := t.abandon(c.XID, w); r != nil {
			return r, nil
		}
		return nil, fmt.Errorf("sunrpc: tcp xid %#x: %w", c.XID, ctx.Err())
	case <-t.done:
		if r := t.abandon(c.XID, w); r != nil {
			return r, nil
		}
		return nil, t.deadErr()
	}
}

// abandon unregisters xid. If readLoop already took the waiter, the reply is
// on its way: abandon waits for it and returns it.
func (t *tcpTransport) abandon(xid uint32, w *waiter) *Reply {
	t.mu.Lock()
	if t.pending[xid] == w {
		delete(t.pending, xid)
		t.mu.Unlock()
		waiterPool.Put(w)
		return nil
	}
	t.mu.Unlock()
	r := <-w.ch
	waiterPool.Put(w)
	return r
}

// send writes c.Msg as one record; writers are serialised.
func (t *tcpTransport) send(ctx context.Context, c *Call) error {
	select {
	case t.wsem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("sunrpc: tcp xid %#x: %w", c.XID, ctx.Err())
	case <-t.done:
		return t.deadErr()
	}
	defer func() { <-t.wsem }()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sunrpc: tcp xid %#x: %w", c.XID, err)
	}
	dl, _ := ctx.Deadline()
	if !dl.Equal(t.wdl) {
		if err := t.conn.SetWriteDeadline(dl); err != nil {
			t.fail(err)
			return t.deadErr()
		}
		t.wdl = dl
	}
	n, err := t.w.write(&c.Msg)
	if err == nil {
		return nil
	}
	if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		// Nothing written: the stream is intact, only this call gives up.
		return fmt.Errorf("sunrpc: tcp xid %#x: %w: %w", c.XID, context.DeadlineExceeded, err)
	}
	if n == 0 && errors.Is(err, ErrRecordTooLarge) {
		return fmt.Errorf("sunrpc: tcp xid %#x: %w", c.XID, err)
	}
	t.fail(err) // a partial record corrupts the stream
	return t.deadErr()
}

// ServeTCP accepts connections on l and serves each with ServeTCPConn until
// ctx ends; then it closes l and every connection, waits for their handlers
// to return, and returns nil. It returns an Accept error other than a
// timeout, after the same cleanup.
func ServeTCP(ctx context.Context, l net.Listener, d Dispatcher, opts TCPOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	log := opts.logger()
	var delay time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				log.Warn("sunrpc: accept", "err", err, "retry_in", delay)
				select {
				case <-time.After(delay):
				case <-ctx.Done():
					return nil
				}
				continue
			}
			return fmt.Errorf("sunrpc: accept: %w", err)
		}
		delay = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ServeTCPConn(ctx, conn, d, opts); err != nil {
				log.Debug("sunrpc: tcp connection ended", "peer", conn.RemoteAddr(), "err", err)
			}
		}()
	}
}

// ServeTCPConn serves record-marked RPC calls on one connection (RFC 5531
// section 11): it reassembles fragments, hands each call to d, running up
// to MaxConcurrent at once, and writes each reply as one record with one
// gathered write. It returns when the peer closes (nil), ctx ends (nil) or
// the stream is bad (ErrRecordTooLarge, ErrMalformed, a read error), after
// closing conn, canceling the ctx given to running handlers and waiting for
// them.
func ServeTCPConn(ctx context.Context, conn net.Conn, d Dispatcher, opts TCPOptions) error {
	setNoDelay(conn)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	maxc := opts.MaxConcurrent
	if maxc <= 0 {
		maxc = 128
	}
	s := &tcpServerConn{
		conn:   conn,
		peer:   conn.RemoteAddr(),
		d:      d,
		rr:     recordReader{r: bufio.NewReaderSize(conn, readBufferSize), max: opts.maxRecord()},
		w:      recordWriter{conn: conn},
		maxRec: opts.maxRecord(),
		maxc:   maxc,
		work:   make(chan *serverCall),
		log:    opts.logger(),
	}
	err := s.readLoop(ctx)
	stopped := ctx.Err() != nil
	// The connection is over (even a half-close: RFC 5531 section 11 gives
	// no meaning to it): running handlers are told, and their replies dropped.
	cancel()
	close(s.work)
	s.wg.Wait()
	conn.Close()
	if stopped || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

type tcpServerConn struct {
	conn    net.Conn
	peer    net.Addr
	d       Dispatcher
	rr      recordReader
	maxRec  int
	maxc    int
	workers int // owned by readLoop
	work    chan *serverCall
	wg      sync.WaitGroup
	log     *slog.Logger

	wmu sync.Mutex
	w   recordWriter
}

// serverCall is one call in progress: its record, request and reply.
type serverCall struct {
	rec []byte
	req Request
	b   Builder
}

var serverCallPool = sync.Pool{New: func() any { return new(serverCall) }}

func (s *tcpServerConn) readLoop(ctx context.Context) error {
	for {
		c := serverCallPool.Get().(*serverCall)
		rec, err := s.rr.readRecord(c.rec)
		c.rec = rec
		if err != nil {
			serverCallPool.Put(c)
			if ctx.Err() == nil && !errors.Is(err, io.EOF) {
				s.log.Warn("sunrpc: closing tcp connection", "peer", s.peer, "err", err)
			}
			return err
		}
		c.req.Reset(rec, nil, s.peer, "tcp")
		select {
		case s.work <- c: // an idle worker took it
			continue
		default:
		}
		if s.workers < s.maxc {
			s.workers++
			s.wg.Add(1)
			go s.worker(ctx, c)
			continue
		}
		select {
		case s.work <- c:
		case <-ctx.Done():
			serverCallPool.Put(c)
			return ctx.Err()
		}
	}
}

func (s *tcpServerConn) worker(ctx context.Context, c *serverCall) {
	defer s.wg.Done()
	s.handle(ctx, c)
	for c := range s.work {
		s.handle(ctx, c)
	}
}

func (s *tcpServerConn) handle(ctx context.Context, c *serverCall) {
	c.b.Reset(c.b.Bytes())
	if s.d.Dispatch(ctx, &c.req, &c.b) && ctx.Err() == nil { // no replies once the server is stopping
		m := c.b.Message()
		if n := m.Len(); n > s.maxRec && len(m.Head) >= 4 {
			xid := binary.BigEndian.Uint32(m.Head)
			s.log.Error("sunrpc: reply exceeds the record limit, sending SYSTEM_ERR", "xid", xid, "bytes", n, "limit", s.maxRec)
			c.b.RunAfterSend()
			c.b.restart()
			rh := acceptedReply(xid, SystemErr)
			rh.Encode(&c.b.Encoder)
			m = c.b.Message()
		}
		s.send(&m)
	}
	c.b.RunAfterSend()
	c.req.Reset(nil, nil, nil, "")
	serverCallPool.Put(c)
}

func (s *tcpServerConn) send(m *Message) {
	s.wmu.Lock()
	_, err := s.w.write(m)
	s.wmu.Unlock()
	if err != nil {
		s.conn.Close() // the reader sees it and ends the connection
	}
}
