package sunrpc

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
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

	// XprtSec is the transport security policy (RFC 9289; nfs(5)
	// xprtsec=). Client: XprtSecTLS and XprtSecMTLS make every connection,
	// the first and each reconnection, send the AUTH_TLS probe and run a
	// TLS 1.3 handshake before its first call; a server that does not
	// offer TLS fails the dial with ErrTLSRefused, never falling back to
	// plaintext. Server: the least a connection must establish. On a
	// server requiring TLS every call of a connection that did not start
	// TLS is denied AUTH_ERROR AUTH_TOOWEAK ("rejected for security
	// reasons", RFC 5531 section 9; RFC 9289 leaves the error to the
	// server's policy); XprtSecMTLS also makes a client certificate that
	// verifies against TLS.ClientCAs required in the handshake.
	XprtSec XprtSec
	// TLS is the TLS configuration; TLS 1.3 only and ALPN "sunrpc" (RFC
	// 9289 section 5) are set over what it says. Client: the server's
	// roots (RootCAs; nil for the system's), ServerName (default: the
	// host of the dialed address) and, for XprtSecMTLS, the client's
	// certificate; nil means all defaults. Server: its certificate, and
	// ClientCAs to verify clients' certificates; a client that gives one
	// is asked for it (RFC 9289 section 4.2) unless ClientAuth says
	// otherwise. A server with TLS offers STARTTLS whatever its XprtSec; a
	// server without answers the probe AUTH_BADCRED, as one that does not
	// know AUTH_TLS. Revocation is the configuration's to check
	// (VerifyConnection); its error fails the handshake as any other.
	TLS *tls.Config
	// ProbeProg and ProbeVers are the program and version a client's
	// AUTH_TLS probe (a NULL call) and first call inside the session
	// name: the program the connection is for, as Linux does. A server
	// answers the probe whatever they are (RFC 9289 section 4.1: the
	// client starts TLS even when the accept_stat is not SUCCESS).
	ProbeProg, ProbeVers uint32
}

// tlsHandshakeTimeout bounds a server's TLS handshake after its STARTTLS
// reply.
const tlsHandshakeTimeout = 10 * time.Second

const readBufferSize = 32 << 10

// peekLen bounds how much of a record the client's reader looks at before
// deciding where the rest goes: a reply header with the largest verifier
// (RFC 5531 section 8.2: 400 bytes of body, 424 bytes of header) and 500
// bytes of results, ahead of a DDP-eligible result's length word (NFS
// READ3res: 100 bytes).
const peekLen = 1024

// stallWait is how long a caller that gave up waits for a reply the reader
// is already reading into its buffer (Call.ReplyPayload) before the
// connection is closed under it, so that the buffer is free again.
const stallWait = time.Second

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
// speaking record-marked RPC over it (RFC 5531 section 11), inside an
// RPC-with-TLS session when opts.XprtSec asks for one (see
// StartTCPTransport). ctx bounds the dial and the session's setup.
func DialTCP(ctx context.Context, addr string, opts TCPOptions) (ClientTransport, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("sunrpc: dial tcp %s: %w", addr, err)
	}
	cfg, err := opts.clientTLSConfig(host)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sunrpc: dial tcp %s: %w", addr, err)
	}
	return startTCPTransport(ctx, c, cfg, opts)
}

// StartTCPTransport is NewTCPTransport with the connection setup that
// opts.XprtSec asks for: with XprtSecTLS or XprtSecMTLS it sends the
// AUTH_TLS probe on conn (a NULL call of opts.ProbeProg and ProbeVers),
// runs a TLS 1.3 handshake (ALPN "sunrpc") once the server answered
// STARTTLS, and makes one NULL call inside the session (RFC 9289 sections
// 4.1, 5 and 5.1.1); the transport then speaks record-marked RPC inside
// the session. ServerName defaults to the host of conn's remote address.
// ctx bounds the setup. On error conn is closed. Errors: ErrTLSRefused (the
// server does not offer TLS: no plaintext fallback), ErrTLSHandshake
// (certificates, alerts, versions, ALPN), ErrMalformed, a configuration
// error, or the connection's failure.
func StartTCPTransport(ctx context.Context, conn net.Conn, opts TCPOptions) (ClientTransport, error) {
	host, _, err := net.SplitHostPort(conn.RemoteAddr().String())
	if err != nil {
		host = conn.RemoteAddr().String()
	}
	cfg, err := opts.clientTLSConfig(host)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return startTCPTransport(ctx, conn, cfg, opts)
}

func startTCPTransport(ctx context.Context, conn net.Conn, cfg *tls.Config, opts TCPOptions) (ClientTransport, error) {
	if cfg == nil {
		return NewTCPTransport(conn, opts), nil
	}
	setNoDelay(conn)
	tc, err := clientStartTLS(ctx, conn, cfg, &opts)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return newTCPTransport(tc, conn, opts), nil
}

// TCPDialer returns a DialFunc that calls DialTCP(ctx, addr, opts).
func TCPDialer(addr string, opts TCPOptions) DialFunc {
	return func(ctx context.Context) (ClientTransport, error) { return DialTCP(ctx, addr, opts) }
}

// NewTCPTransport returns a client transport over an established stream
// connection and starts its reader goroutine; Close stops it. Replies are
// matched to calls by XID and may arrive in any order. A DDP-eligible
// result is read straight into Call.ReplyPayload when the call says where
// it is (Call.LocateReplyPayload) and the reply is one fragment; otherwise
// it stays inline (Placed -1).
//
// NewTCPTransport speaks plaintext: it does no connection setup. With
// opts.XprtSec asking for RPC-with-TLS it closes conn and returns a
// transport whose calls fail with an error saying so, rather than fall
// back to plaintext; use StartTCPTransport.
func NewTCPTransport(conn net.Conn, opts TCPOptions) ClientTransport {
	if opts.XprtSec != XprtSecNone {
		conn.Close()
		t := &tcpTransport{conn: conn, raw: conn, pending: map[uint32]*waiter{},
			done: make(chan struct{}), readerDone: make(chan struct{}), log: opts.logger(),
			err: fmt.Errorf("sunrpc: xprtsec=%v asked of NewTCPTransport, which speaks plaintext: use StartTCPTransport", opts.XprtSec)}
		close(t.done)
		close(t.readerDone)
		return t
	}
	setNoDelay(conn)
	return newTCPTransport(conn, conn, opts)
}

// newTCPTransport returns the transport over conn, raw itself or a TLS
// session over raw.
func newTCPTransport(conn, raw net.Conn, opts TCPOptions) *tcpTransport {
	br := bufio.NewReaderSize(conn, readBufferSize)
	tc, _ := conn.(*tls.Conn)
	t := &tcpTransport{
		conn:       conn,
		raw:        raw,
		tls:        tc,
		br:         br,
		rr:         recordReader{r: br, max: opts.maxRecord()},
		w:          recordWriter{conn: conn, coalesce: tc != nil},
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
	conn net.Conn      // raw, or tls over it
	raw  net.Conn      // the TCP connection
	tls  *tls.Conn     // conn when it is an RPC-with-TLS session, else nil
	br   *bufio.Reader // rr's reader; owned by readLoop
	rr   recordReader  // owned by readLoop
	w    recordWriter  // guarded by wsem
	wsem chan struct{}
	wdl  time.Time // write deadline set on conn; guarded by wsem
	log  *slog.Logger

	mu      sync.Mutex
	pending map[uint32]*waiter
	err     error // why the connection died; wraps ErrConnLost

	done       chan struct{} // closed with err set
	readerDone chan struct{}
}

// waiter is where readLoop delivers the reply of one registered XID: the
// reply, or nil when the connection failed while readLoop was reading it.
type waiter struct {
	ch   chan *Reply
	call *Call // the call, while registered
}

var (
	waiterPool = sync.Pool{New: func() any { return &waiter{ch: make(chan *Reply, 1)} }}
	replyPool  = sync.Pool{New: func() any { return new(Reply) }}
)

// ReleaseReply implements Releaser: the reply and its buffer are recycled.
func (t *tcpTransport) ReleaseReply(r *Reply) {
	r.Body = r.Body[:0]
	r.Placed = -1
	replyPool.Put(r)
}

func (t *tcpTransport) Done() <-chan struct{} { return t.done }

// TLSState implements TLSStater.
func (t *tcpTransport) TLSState() (tls.ConnectionState, bool) {
	if t.tls == nil {
		return tls.ConnectionState{}, false
	}
	return t.tls.ConnectionState(), true
}

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
		t.err = fmt.Errorf("%w: tcp %v: %w", ErrConnLost, t.raw.RemoteAddr(), cause)
		close(t.done)
	}
	t.mu.Unlock()
	if errors.Is(cause, ErrClosed) {
		t.conn.Close() // a TLS session ends with its closure alert (RFC 9289 section 5.1.1)
	}
	t.raw.Close()
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
		w, err := t.readReply(r)
		if err != nil {
			t.ReleaseReply(r)
			if errors.Is(err, ErrRecordTooLarge) || errors.Is(err, ErrMalformed) {
				t.log.Warn("sunrpc: closing tcp connection", "peer", t.conn.RemoteAddr(), "err", err)
			}
			t.fail(err)
			if w != nil {
				w.ch <- nil // its caller waits for the reply it was taken for
			}
			return
		}
		if w == nil { // not a reply, the caller gave up, or a duplicate reply
			t.ReleaseReply(r)
			continue
		}
		r.Owner = t
		w.ch <- r // buffered: one reply per registration
	}
}

// readReply reads the next record into r and returns the waiter of the
// call it answers, taken out of pending, or nil if no call waits for it.
// A one-fragment reply is matched by its first bytes before the rest is
// read, so that a DDP-eligible result its call located (placement) goes
// from the socket straight into Call.ReplyPayload, left out of r.Body as
// an RDMA Write chunk leaves it (Reply.Placed). With an error, a non-nil
// waiter was taken and still needs an answer. Errors are readRecord's.
func (t *tcpTransport) readReply(r *Reply) (*waiter, error) {
	r.Placed = -1
	h, err := t.rr.readHeader(false)
	if err != nil {
		return nil, err
	}
	n := int(h &^ lastFragment)
	if h&lastFragment == 0 || n > t.rr.max {
		r.Body, err = t.rr.readFrom(r.Body, h)
		if err != nil {
			return nil, err
		}
		return t.take(r.Body), nil
	}
	peek, err := t.br.Peek(min(n, peekLen))
	if err != nil {
		return nil, inFragment(err)
	}
	w := t.take(peek)
	head, size := n, 0
	if w != nil {
		head, size = placement(peek, n, w.call)
	}
	if cap(r.Body) < head {
		r.Body = make([]byte, head)
	}
	r.Body = r.Body[:head]
	if _, err := io.ReadFull(t.br, r.Body); err != nil {
		return w, inFragment(err)
	}
	if size > 0 {
		if _, err := io.ReadFull(t.br, w.call.ReplyPayload[:size]); err != nil {
			return w, inFragment(err)
		}
		if _, err := t.br.Discard(xdr.Pad(size)); err != nil {
			return w, inFragment(err)
		}
		r.Placed = size
	}
	return w, nil
}

// take returns the waiter of the reply that begins with b (RFC 5531
// section 9: xid, then msg_type), removed from pending; nil when b is not
// a reply (e.g. a backchannel call) or no call waits for its XID.
func (t *tcpTransport) take(b []byte) *waiter {
	if len(b) < 8 || MsgType(binary.BigEndian.Uint32(b[4:])) != MsgReply {
		return nil
	}
	xid := binary.BigEndian.Uint32(b)
	t.mu.Lock()
	w := t.pending[xid]
	if w != nil {
		delete(t.pending, xid)
	}
	t.mu.Unlock()
	return w
}

// placement locates the DDP-eligible result of c in the reply of n bytes
// (one fragment) that begins with peek: it returns the bytes up to and
// including the result's length word (head) and the result's size, or
// (n, 0) when the result is not placed: c has no ReplyPayload or locator,
// the reply is not an accepted SUCCESS, the locator finds nothing, the
// result is empty or larger than ReplyPayload, or the result and its pad
// do not end the reply exactly (as the last item must).
func placement(peek []byte, n int, c *Call) (head, size int) {
	if c.ReplyPayload == nil || c.LocateReplyPayload == nil {
		return n, 0
	}
	var d xdr.Decoder
	d.Reset(peek)
	if rh, err := DecodeReplyHeader(&d); err != nil || rh.Err() != nil {
		return n, 0
	}
	res := d.Offset()
	at := c.LocateReplyPayload(peek[res:])
	if at < 0 || at > len(peek)-res-4 {
		return n, 0
	}
	head = res + at + 4
	size = int(binary.BigEndian.Uint32(peek[head-4:]))
	if size == 0 || size > len(c.ReplyPayload) || head+size+xdr.Pad(size) != n {
		return n, 0
	}
	return head, size
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
	w.call = c
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
		w.call = nil
		waiterPool.Put(w)
		if r == nil {
			return nil, t.deadErr()
		}
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
// on its way, and may be being read into the call's ReplyPayload: abandon
// waits for it and returns it (nil if the connection failed meanwhile).
// A reply that does not complete within stallWait fails the connection,
// which ends the read, so that the caller gets its buffer back.
func (t *tcpTransport) abandon(xid uint32, w *waiter) *Reply {
	t.mu.Lock()
	if t.pending[xid] == w {
		delete(t.pending, xid)
		t.mu.Unlock()
		w.call = nil
		waiterPool.Put(w)
		return nil
	}
	t.mu.Unlock()
	var r *Reply
	select {
	case r = <-w.ch:
	case <-time.After(stallWait):
		t.fail(fmt.Errorf("reply of xid %#x stalled for %v after its caller gave up", xid, stallWait))
		r = <-w.ch
	}
	w.call = nil
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
	if n == 0 && t.tls == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		// Nothing written: the stream is intact, only this call gives up.
		// (A TLS session is broken by any failed write.)
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
// timeout, after the same cleanup, and at once an error for TCPOptions that
// cannot serve (RPC-with-TLS asked without a certificate, ...).
func ServeTCP(ctx context.Context, l net.Listener, d Dispatcher, opts TCPOptions) error {
	sec, err := opts.serverTLS()
	if err != nil {
		l.Close()
		return err
	}
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
			if err := serveTCPConn(ctx, conn, d, opts, sec); err != nil {
				log.Debug("sunrpc: tcp connection ended", "peer", conn.RemoteAddr(), "err", err)
			}
		}()
	}
}

// ServeTCPConn serves record-marked RPC calls on one connection (RFC 5531
// section 11): it reassembles fragments, hands each call to d, running up
// to MaxConcurrent at once, and writes each reply as one record with one
// gathered write. With opts.TLS it offers RPC-with-TLS (RFC 9289): when
// the connection's first call is the AUTH_TLS probe and d (a *Server)
// answers it STARTTLS, it runs the TLS handshake and serves the calls that
// follow inside the session, each Request carrying the session (TLS); with
// opts.XprtSec requiring TLS, calls on a connection that did not start it
// are denied AUTH_TOOWEAK. It returns when the peer closes (nil), ctx ends
// (nil) or the stream is bad (ErrRecordTooLarge, ErrMalformed, a read
// error, ErrTLSHandshake, logged with the peer's address), after closing
// conn, canceling the ctx given to running handlers and waiting for them.
// A configuration that cannot serve (see TCPOptions) is an error at once.
func ServeTCPConn(ctx context.Context, conn net.Conn, d Dispatcher, opts TCPOptions) error {
	sec, err := opts.serverTLS()
	if err != nil {
		conn.Close()
		return err
	}
	return serveTCPConn(ctx, conn, d, opts, sec)
}

func serveTCPConn(ctx context.Context, conn net.Conn, d Dispatcher, opts TCPOptions, sec *serverTLS) error {
	setNoDelay(conn)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	maxc := opts.MaxConcurrent
	if maxc <= 0 {
		maxc = 128
	}
	br := bufio.NewReaderSize(conn, readBufferSize)
	s := &tcpServerConn{
		conn:   conn,
		peer:   conn.RemoteAddr(),
		d:      d,
		br:     br,
		rr:     recordReader{r: br, max: opts.maxRecord()},
		w:      recordWriter{conn: conn},
		maxRec: opts.maxRecord(),
		maxc:   maxc,
		work:   make(chan *serverCall),
		log:    opts.logger(),
		sec:    sec,
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
	conn    net.Conn // the TCP connection, also under a TLS session
	peer    net.Addr
	d       Dispatcher
	br      *bufio.Reader // rr's reader; owned by readLoop
	rr      recordReader
	sec     *serverTLS // nil: no RPC-with-TLS
	tls     *TLSInfo   // the session once started; set by readLoop before any worker runs
	refused bool       // a plaintext call was denied; owned by readLoop
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
	first := true
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
		c.req.TLS = s.tls
		if s.sec != nil && s.tls == nil {
			// RFC 9289 section 4.1: STARTTLS is offered to an AUTH_TLS probe
			// that is the connection's first call; the reply goes out before
			// the handshake starts, and nothing else runs meanwhile.
			probe := isTLSProbe(rec)
			if first && probe {
				first = false
				c.req.offerTLS = true
				if s.handle(ctx, c) {
					if err := s.startTLS(ctx); err != nil {
						return err
					}
				}
				continue
			}
			first = false
			if s.sec.required && !probe {
				s.refuse(c)
				continue
			}
		}
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

// handle dispatches c and sends its reply. It reports whether the reply
// sent was the STARTTLS answer to an AUTH_TLS probe.
func (s *tcpServerConn) handle(ctx context.Context, c *serverCall) (startTLS bool) {
	c.b.Reset(c.b.Bytes())
	if s.d.Dispatch(ctx, &c.req, &c.b) && ctx.Err() == nil { // no replies once the server is stopping
		startTLS = c.req.startTLS
		m := c.b.Message()
		if n := m.Len(); n > s.maxRec && len(m.Head) >= 4 {
			xid := binary.BigEndian.Uint32(m.Head)
			s.log.Error("sunrpc: reply exceeds the record limit, sending SYSTEM_ERR", "xid", xid, "bytes", n, "limit", s.maxRec)
			c.b.RunAfterSend()
			c.b.restart()
			rh := acceptedReply(xid, SystemErr)
			rh.Encode(&c.b.Encoder)
			m = c.b.Message()
			startTLS = false
		}
		startTLS = s.send(&m) && startTLS
	}
	c.b.RunAfterSend()
	c.req.Reset(nil, nil, nil, "")
	serverCallPool.Put(c)
	return startTLS
}

// send writes m; on failure it closes the connection and returns false.
func (s *tcpServerConn) send(m *Message) bool {
	s.wmu.Lock()
	_, err := s.w.write(m)
	s.wmu.Unlock()
	if err != nil {
		s.conn.Close() // the reader sees it and ends the connection
		return false
	}
	return true
}
