package sunrpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// RetryPolicy says when a Client retransmits a call. A retransmission reuses
// the call's XID (RFC 5531 section 9: the XID lets the server's duplicate
// request cache recognise it), on the same connection after Timeout, or on a
// new connection after ErrConnLost.
type RetryPolicy struct {
	// Soft makes a call give up after Retries failed tries (lost connection,
	// failed dial, Timeout without a reply) with an error wrapping
	// ErrTimeout and the last cause. Hard (the default) retries until the
	// call's ctx ends.
	Soft    bool
	Retries int
	// Timeout is how long to wait for a reply before retransmitting on the
	// same connection (NFS "timeo"); 0 waits until the connection dies or
	// ctx ends. A non-zero Timeout costs one context allocation per try.
	Timeout time.Duration
	// MaxBackoff bounds the pause between consecutive failed connection
	// attempts: 0, 10ms, 20ms, ... up to MaxBackoff (0 means 1s).
	MaxBackoff time.Duration
	// DialTimeout bounds each connection attempt (TCP connect, RDMA
	// connection setup): a server that accepts connections but does not
	// answer them (stopped, hung) costs a call one failed try, counted
	// against Retries, instead of the transport's own handshake timeout.
	// 0 means Timeout, but at least MinDialTimeout so that a short timeo
	// does not cut off every handshake; with Timeout 0 too, only ctx and
	// the transport bound a dial.
	DialTimeout time.Duration
}

// MinDialTimeout is the least default RetryPolicy.DialTimeout, 1 s: an
// RPC-over-RDMA connection setup (MPA exchange, RTR) takes more than the
// smallest timeo (0.1 s).
const MinDialTimeout = time.Second

// dialTimeout is the bound of one connection attempt, 0 for none.
func (p *RetryPolicy) dialTimeout() time.Duration {
	switch {
	case p.DialTimeout > 0:
		return p.DialTimeout
	case p.Timeout > 0:
		return max(p.Timeout, MinDialTimeout)
	}
	return 0
}

// ClientOptions configures a Client.
type ClientOptions struct {
	// AuthSys, when not nil, makes every call carry this AUTH_SYS credential
	// (RFC 5531 appendix A); nil means AUTH_NONE.
	AuthSys *AuthSysParams
	Retry   RetryPolicy
	// XIDs, when not nil, is the XID counter of the client, shared with
	// other Clients given the same one (the connections of one NFS mount,
	// nconnect): no two calls of those Clients carry the same XID until
	// it wraps. nil: a counter of its own. Either way the counter starts
	// at a random value.
	XIDs *XIDCounter
}

// XIDCounter hands out XIDs (RFC 5531 section 9) to the Clients sharing
// it. The zero value is not ready: use NewXIDCounter.
type XIDCounter struct{ n atomic.Uint32 }

// NewXIDCounter returns a counter starting at a random XID.
func NewXIDCounter() *XIDCounter {
	x := &XIDCounter{}
	x.n.Store(rand.Uint32())
	return x
}

// ClientStats are a Client's counters since NewClient.
type ClientStats struct {
	Calls       uint64 // calls started (Call and Null)
	Retransmits uint64 // transmissions after a call's first one
	Reconnects  uint64 // connections established after the first
}

// CallSpec describes one call for Client.Call.
type CallSpec struct {
	Prog, Vers, Proc uint32
	// Args encodes the arguments after the call header (nil: void). It may
	// mark one DDP-eligible argument (e.g. NFS WRITE data) with b.Payload.
	// It runs once per call, even if the call is retransmitted; b must not
	// be kept.
	Args func(b *Builder)
	// Results decodes the results of a SUCCESS reply from d (nil: ignore
	// them). placed is Reply.Placed: the bytes of a DDP-eligible result
	// placed in ReplyPayload, or -1 when it is inline in d. d and its bytes
	// are valid only during the call; its error, if any, is returned by Call.
	Results func(d *xdr.Decoder, placed int) error
	// ReplyPayload, LocateReplyPayload, MaxReplySize and UnboundedReply
	// are passed to the transport (see Call).
	ReplyPayload       []byte
	LocateReplyPayload func(results []byte) int
	MaxReplySize       int
	UnboundedReply     bool
	// TakePlaced, when not nil, takes a DDP-eligible result the transport
	// left in its receive buffers (Reply.PlacedVec, Call.KeepPlaced) after
	// Results succeeded: ReplyPayload was not written, vec holds the
	// placed bytes, and the reply is the taker's until it calls release
	// (exactly once). Without such a result the reply is released by
	// Call as usual.
	TakePlaced func(vec [][]byte, release func())
	// Cred, when not nil, is this call's credential instead of the
	// client's (RFC 5531 section 8.2): how a client serving several users
	// (a FUSE mount) makes each call as the user it is for.
	Cred *OpaqueAuth
}

// Client makes RPC calls (RFC 5531) over transports obtained from a
// DialFunc, reconnecting when a transport dies. It is safe for concurrent
// use; calls share one transport at a time.
type Client struct {
	dial  DialFunc
	cred  OpaqueAuth
	retry RetryPolicy
	xid   *XIDCounter

	calls, retransmits, reconnects atomic.Uint64

	mu      sync.Mutex
	tr      ClientTransport
	dialing chan struct{} // closed when the dial in progress ends
	dialed  bool
	closed  bool

	pool sync.Pool // *clientCall
}

// clientCall is the per-call state, pooled so that a call does not allocate.
type clientCall struct {
	b    Builder
	call Call
	dec  xdr.Decoder
}

// NewClient returns a Client that dials with dial when it first needs a
// connection. It fails only when opts.AuthSys breaks the limits of RFC 5531
// appendix A.
func NewClient(dial DialFunc, opts ClientOptions) (*Client, error) {
	c := &Client{dial: dial, retry: opts.Retry, xid: opts.XIDs}
	if c.xid == nil {
		c.xid = NewXIDCounter()
	}
	if opts.AuthSys != nil {
		cred, err := opts.AuthSys.Credential()
		if err != nil {
			return nil, err
		}
		c.cred = cred
	}
	if c.retry.MaxBackoff <= 0 {
		c.retry.MaxBackoff = time.Second
	}
	c.pool.New = func() any { return &clientCall{} }
	return c, nil
}

// Stats returns the counters.
func (c *Client) Stats() ClientStats {
	return ClientStats{Calls: c.calls.Load(), Retransmits: c.retransmits.Load(), Reconnects: c.reconnects.Load()}
}

// TLSState reports the RPC-with-TLS session of the current connection (RFC
// 9289): ok is false when there is no live connection or it is plaintext.
// It lets a caller show the security actually in effect (RFC 9289 section
// 7.1).
func (c *Client) TLSState() (st tls.ConnectionState, ok bool) {
	c.mu.Lock()
	t := c.tr
	c.mu.Unlock()
	if s, is := t.(TLSStater); is {
		return s.TLSState()
	}
	return tls.ConnectionState{}, false
}

// Close closes the current transport; calls in progress and later calls
// fail with an error wrapping ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	t := c.tr
	c.tr = nil
	c.mu.Unlock()
	if t != nil {
		return t.Close()
	}
	return nil
}

// Call makes one call and waits for its reply, retransmitting as the
// RetryPolicy says. The deadline and cancellation of ctx bound the whole
// call, retransmissions included. Errors (all wrapped, with prog, vers,
// proc and XID in the text):
//
//   - the server's refusal (RFC 5531 section 9): ErrProgUnavail,
//     ErrProcUnavail, ErrGarbageArgs, ErrSystemErr, *MismatchError
//     (ErrProgMismatch, ErrRPCMismatch), *AuthError (ErrAuth);
//   - ErrTimeout (soft policy), ctx's error, ErrClosed;
//   - ErrTLSRefused, ErrTLSHandshake: a connection could not set up the
//     RPC-with-TLS session its TCPOptions.XprtSec asks for; these end the
//     call at once, also under a hard RetryPolicy;
//   - ErrMalformed for an undecodable reply header; Results' error.
func (c *Client) Call(ctx context.Context, s CallSpec) error {
	if s.Cred != nil {
		return c.do(ctx, &s, *s.Cred, false)
	}
	return c.do(ctx, &s, c.cred, false)
}

// Null calls procedure 0 (NULL) of prog/vers with AUTH_NONE and no
// retransmission: one try, on the current connection or a new one if it is
// dead, bounded by ctx. It suits keepalive pings and server probes.
func (c *Client) Null(ctx context.Context, prog, vers uint32) error {
	s := CallSpec{Prog: prog, Vers: vers}
	return c.do(ctx, &s, OpaqueAuth{}, true)
}

func (c *Client) do(ctx context.Context, s *CallSpec, cred OpaqueAuth, oneShot bool) error {
	cc := c.pool.Get().(*clientCall)
	defer c.pool.Put(cc)
	xid := c.xid.n.Add(1)
	cc.b.Reset(cc.b.Bytes())
	h := CallHeader{XID: xid, RPCVers: RPCVersion, Prog: s.Prog, Vers: s.Vers, Proc: s.Proc, Cred: cred}
	h.Encode(&cc.b.Encoder)
	if s.Args != nil {
		s.Args(&cc.b)
	}
	cc.call = Call{XID: xid, Msg: cc.b.Message(), ReplyPayload: s.ReplyPayload, LocateReplyPayload: s.LocateReplyPayload, MaxReplySize: s.MaxReplySize, UnboundedReply: s.UnboundedReply,
		KeepPlaced: s.TakePlaced != nil && s.ReplyPayload != nil}
	defer func() { cc.call = Call{}; cc.b.payload = nil; cc.dec.Reset(nil) }()
	c.calls.Add(1)

	r, err := c.roundTrip(ctx, &cc.call, oneShot)
	if err != nil {
		return fmt.Errorf("sunrpc: call prog %d vers %d proc %d xid %#x: %w", s.Prog, s.Vers, s.Proc, xid, err)
	}
	kept := false
	defer func() {
		if !kept {
			r.Release()
		}
	}()
	cc.dec.Reset(r.Body)
	rh, err := DecodeReplyHeader(&cc.dec)
	if err == nil && rh.XID != xid {
		err = fmt.Errorf("%w: reply xid %#x", ErrMalformed, rh.XID)
	}
	if err == nil {
		err = rh.Err()
	}
	if err == nil && s.Results != nil {
		err = s.Results(&cc.dec, r.Placed)
	}
	if err == nil && r.PlacedVec != nil && s.TakePlaced != nil {
		kept = true
		s.TakePlaced(r.PlacedVec, r.Release)
	}
	if err != nil {
		return fmt.Errorf("sunrpc: call prog %d vers %d proc %d xid %#x: %w", s.Prog, s.Vers, s.Proc, xid, err)
	}
	return nil
}

// roundTrip sends call until a reply comes back or the policy gives up.
func (c *Client) roundTrip(ctx context.Context, call *Call, oneShot bool) (*Reply, error) {
	var last error
	var backoff time.Duration
	sent := false
	for tries := 0; ; tries++ {
		if tries > 0 {
			if oneShot {
				return nil, last
			}
			if c.retry.Soft && tries > c.retry.Retries {
				return nil, fmt.Errorf("%w after %d retries: %w", ErrTimeout, c.retry.Retries, last)
			}
			if backoff > 0 {
				if err := sleep(ctx, backoff); err != nil {
					return nil, fmt.Errorf("%w (last: %w)", err, last)
				}
			}
		}
		t, err := c.transport(ctx)
		if err != nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrTLSRefused) || errors.Is(err, ErrTLSHandshake) {
				// The server said no to RPC-with-TLS, or one side refused
				// the other's certificate: trying again would get the
				// same answer (as Linux fails such a call at once).
				return nil, err
			}
			if ctx.Err() != nil {
				return nil, ctxErr(ctx, err)
			}
			last = err
			backoff = c.nextBackoff(backoff)
			continue
		}
		if sent {
			c.retransmits.Add(1)
		}
		sent = true
		rctx, cancel := ctx, context.CancelFunc(nil)
		if c.retry.Timeout > 0 {
			rctx, cancel = context.WithTimeout(ctx, c.retry.Timeout)
		}
		r, err := t.RoundTrip(rctx, call)
		if cancel != nil {
			cancel()
		}
		if err == nil {
			return r, nil
		}
		switch {
		case ctx.Err() != nil:
			return nil, ctxErr(ctx, err)
		case errors.Is(err, ErrConnLost):
			c.drop(t)
			c.mu.Lock()
			closed := c.closed
			c.mu.Unlock()
			if closed {
				return nil, fmt.Errorf("%w: %w", ErrClosed, err)
			}
			backoff = c.nextBackoff(backoff)
		case rctx.Err() != nil: // per-try Timeout: retransmit on the same connection
			backoff = 0
		default:
			return nil, err
		}
		last = err
	}
}

func (c *Client) nextBackoff(d time.Duration) time.Duration {
	if d == 0 {
		return 10 * time.Millisecond
	}
	return min(2*d, c.retry.MaxBackoff)
}

// ctxErr makes sure the error returned when ctx ended matches ctx.Err().
func ctxErr(ctx context.Context, err error) error {
	if errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// transport returns the live transport, dialing one if there is none. One
// dial runs at a time, bounded by ctx and RetryPolicy.dialTimeout; other
// callers wait for it.
func (c *Client) transport(ctx context.Context) (ClientTransport, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if t := c.tr; t != nil {
			select {
			case <-t.Done():
				c.tr = nil
				c.mu.Unlock()
				t.Close()
				continue
			default:
				c.mu.Unlock()
				return t, nil
			}
		}
		if ch := c.dialing; ch != nil {
			c.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		c.dialing = ch
		c.mu.Unlock()

		dctx, cancel := ctx, context.CancelFunc(func() {})
		if d := c.retry.dialTimeout(); d > 0 {
			dctx, cancel = context.WithTimeout(ctx, d)
		}
		t, err := c.dial(dctx)
		cancel()

		c.mu.Lock()
		c.dialing = nil
		close(ch)
		if err != nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("sunrpc: dial: %w", err)
		}
		if c.closed {
			c.mu.Unlock()
			t.Close()
			return nil, ErrClosed
		}
		c.tr = t
		if c.dialed {
			c.reconnects.Add(1)
		}
		c.dialed = true
		c.mu.Unlock()
		return t, nil
	}
}

// drop forgets t if it is still current, and closes it.
func (c *Client) drop(t ClientTransport) {
	c.mu.Lock()
	if c.tr == t {
		c.tr = nil
	}
	c.mu.Unlock()
	t.Close()
}
