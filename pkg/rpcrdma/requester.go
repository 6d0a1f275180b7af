package rpcrdma

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// ClientOptions configures a requester connection. Zero fields take the
// defaults in brackets.
type ClientOptions struct {
	// Credits is the most calls the requester keeps outstanding, whatever
	// the responder grants, and what it asks for in rdma_credit [32]. It
	// sizes the send and receive buffer pools: Credits x Inline bytes each.
	Credits int
	// Inline is our send and receive size, in bytes, advertised in RFC 8797
	// private data [OurInline, 4096]; 1024..262144, a multiple of 1024.
	// With SendDDP it applies to version 2 only: a connection in version
	// 1 (MaxVersion 1, a responder Versions knows as version 1, or one
	// that answers the negotiation with ERR_VERS, which is then dialed
	// again) uses at most OurInline.
	Inline int
	// MaxReply is the largest reply, in bytes, without a DDP-eligible
	// result, assumed for a call whose MaxReplySize is 0: the size of the
	// Reply chunk offered for it [65536].
	MaxReply int
	// IRD is the RDMA Reads the responder may have outstanding against
	// our Read chunks [16]; at least 1. ORD is the RDMA Reads we may issue,
	// to pull responder-provided Read chunks [4 when MaxVersion is 2 and
	// NoResponderReadChunks is false, else 0].
	IRD, ORD int
	// NoContinuation stops a version 2 connection from sending a call
	// too large for one Send as several (message continuation, the
	// draft's section 6.6.2): it goes in a Call chunk, as in version 1.
	NoContinuation bool
	// NoRemoteInvalidate stops us from advertising Remote Invalidation
	// (RFC 8797): the responder then replies with plain Sends, and our
	// RDMA2_DONE messages go by plain Send too.
	NoRemoteInvalidate bool
	// NoResponderReadChunks stops a version 2 connection from announcing
	// responder-provided Read chunks (RPRCPull, rprc_requester.go): calls with
	// sunrpc.Call.UnboundedReply then get a Reply chunk of MaxReplySize,
	// as without the extension.
	NoResponderReadChunks bool
	// SendDDP announces our Receive Buffer Structure and sends the
	// DDP-eligible argument of a call that would go in a Read chunk by
	// send-based DDP instead, when the responder announced a structure
	// with DDP-targetable segments the call fits (sddp_requester.go); off by
	// default [false].
	SendDDP bool
	// SendDDPGroups, with SendDDP, also sends a DDP-eligible argument
	// larger than the responder's DDP-targetable window as a
	// transmission group of Sends (sddpgroup.go) rather than in a Read
	// chunk, and offers no Write chunk for a result larger than ours,
	// when they fit MaxContinuation Sends and the credits allow; off by
	// default [false]: on software iWARP a group costs more than the
	// chunk it replaces (the package doc's "Send-based DDP").
	SendDDPGroups bool
	// Limits bound the reply headers we decode.
	Limits Limits
	// MaxVersion is the highest RPC-over-RDMA version to speak: 2 (the
	// default) opens each connection with version 2 negotiation and falls
	// back to version 1 when the responder answers ERR_VERS (the draft's
	// section 4.3); 1 speaks version 1 only (RFC 8166) [2].
	MaxVersion int
	// Versions remembers, per responder address, that it speaks version
	// 1 only, so that reconnections skip negotiation
	// [DefaultVersionCache].
	Versions *VersionCache
	// HandshakeTimeout bounds the wait for the answer to the version 2
	// negotiation message; without one the address is taken as version
	// 1 only and Dial fails with ErrNoVersion2 [5s].
	HandshakeTimeout time.Duration
	// Metrics, when not nil, collects this connection's counters (shared
	// among connections, e.g. across reconnects); nil gives the Client
	// its own.
	Metrics *ClientMetrics
	Logger  *slog.Logger
}

// ClientMetrics collects requester counters; it may be shared by the
// Clients of one mount across reconnects. The zero value is ready.
type ClientMetrics struct{ m metrics }

// Metrics returns a snapshot of the counters.
func (cm *ClientMetrics) Metrics() Metrics { return cm.m.snapshot() }

func (o *ClientOptions) fill() error {
	if o.Credits <= 0 {
		o.Credits = 32
	}
	if o.Inline == 0 {
		o.Inline = OurInline
	}
	if o.Inline < MinInlineSize || o.Inline > MaxInlineSize || o.Inline%1024 != 0 {
		return fmt.Errorf("%w: inline size %d (RFC 8797: 1024..262144, multiple of 1024)", ErrInvalid, o.Inline)
	}
	if o.MaxReply <= 0 {
		o.MaxReply = 64 << 10
	}
	o.MaxReply = xdr.RoundUp(o.MaxReply)
	if o.IRD <= 0 {
		o.IRD = 16
	}
	switch o.MaxVersion {
	case 0:
		o.MaxVersion = Version2
	case Version, Version2:
	default:
		return fmt.Errorf("%w: RPC-over-RDMA version %d (1 or 2)", ErrInvalid, o.MaxVersion)
	}
	if o.ORD <= 0 && o.MaxVersion >= Version2 && !o.NoResponderReadChunks {
		o.ORD = 4 // RDMA Reads of responder-provided Read chunks
	}
	if o.Versions == nil {
		o.Versions = DefaultVersionCache
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 5 * time.Second
	}
	if o.Metrics == nil {
		o.Metrics = &ClientMetrics{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Work request IDs: the kind in the top byte, an index below.
const (
	wrRecv uint64 = iota << 56
	wrSend
	wrInv
	wrRead
	wrWrite
	wrGrant           // a responder's RDMA2_GRANT
	wrDone            // a requester's RDMA2_DONE
	wrKindMask uint64 = 0xff << 56
)

// Client is the requester end of one RPC-over-RDMA connection, version 1
// (RFC 8166 section 3) or version 2 as negotiated at Dial (the draft's
// section 4.3): a sunrpc.ClientTransport. It is safe for concurrent use.
type Client struct {
	cqd    cqDrain
	opts   ClientOptions
	m      *metrics
	pd     verbs.PD
	cq     verbs.CQ
	qp     verbs.QP
	sq     verbs.SendQueuer // qp, when it can queue a Send to transmit later
	info   verbs.ConnInfo
	peer   PrivateData
	inline Inline
	lim    Limits
	remInv bool // we advertised Remote Invalidation

	// vers is the connection's RPC-over-RDMA version (1 or 2), set by Dial.
	vers uint32
	// Version 2: the peer's transport properties (props; peerProps while
	// CONNPROP_MIDDLE accumulates), and receives ever posted (posted):
	// our rdma_credit is posted-1, one receive held back for an
	// RDMA2_GRANT (the draft's section 4.2.1.1).
	props     Properties
	peerProps []Prop
	posted    atomic.Uint32
	// Responder-provided Read chunks (rprc_requester.go): used on this
	// connection (rprc), RDMA2_DONE by Send With Invalidate (rprcInv),
	// RDMA Reads in flight (pullSem, ORD tokens), the RDMA2_DONE queue
	// (dq, under mu), a reply for no call (orphan, completion goroutine).
	rprc, rprcInv bool
	pullSem       chan struct{}
	// Send-based DDP (sddp_requester.go): used for calls on this connection
	// (sddp), into the responder's DDP-targetable window sddpWin of
	// receives of at most sddpLimit bytes.
	sddp       bool
	sddpWin    ddpWindow
	sddpLimit  int
	peerRBS    RecvBufStruct
	peerHasRBS bool
	mangleSDDP func(*SDDP)      // tests: alters the placement sent
	mangleXNum func(int) uint32 // tests: the rdma_xnum of a group's i-th Send
	dropPart   int              // tests: the group's Send left out (from 1; 0 none)
	pullPosted func()           // tests: called once an RDMA Read of a pull is posted
	dq         doneQueue
	orphan     Header

	sendMR, recvMR verbs.MR
	recv           recvLayout // of the receives in recvMR
	slots          []slot
	recvWRs        []verbs.RecvWR // one per receive buffer, prebuilt
	recvSGEs       []verbs.SGE

	// sendMu serializes the posting of version 2 calls, so that the
	// Sends of a continued call are not interleaved with others.
	sendMu sync.Mutex

	mu      sync.Mutex
	free    []int           // free slot indexes
	waiters []*creditWaiter // callers waiting for a credit, FIFO
	inUse   int             // slots held (outstanding or abandoned or reply not released)
	window  int             // min(Credits, last grant)
	// Version 2 flow control (the draft's section 4.2.1): Sends posted
	// (sent) and the responder's last rdma_credit (limit); a call may be
	// sent while sent < limit (modulo 2^32).
	sent, limit uint32
	byXID       map[uint32]int // outstanding calls
	// grpReserved is the receives beyond the credits that calls expecting
	// a send-based DDP transmission group as reply reserved
	// (sddpgroup.go), at most MaxContinuation.
	grpReserved int
	dead        bool
	freed       bool // release ran: free slots give back their buffers at once

	done    chan struct{}
	err     error // why the connection died; wraps sunrpc.ErrConnLost
	loopEnd chan struct{}
	cancel  context.CancelFunc
}

type slotState uint8

const (
	slotFree slotState = iota
	slotBusy
	slotAbandoned // RoundTrip returned; the reply has not arrived
)

// slot is the state of one credit: a call in flight and its reply.
type slot struct {
	c     *Client
	idx   int
	state slotState
	xid   uint32
	done  chan struct{} // reply arrived (cap 1)
	inv   chan struct{} // local invalidate completed (cap 1)

	hdr      Header // the call's transport header
	readSeg  [1]ReadSegment
	writeSeg [1]Segment
	writes   [1][]Segment
	replySeg [1]Segment

	// Filled by the completion goroutine.
	rep       Header
	recvIdx   int
	recvLen   int
	hdrLen    int
	decodeErr error
	invKey    uint32 // STag the responder invalidated (Send With Invalidate), 0 if none

	posted     bool // the call's Send was posted
	extraSends int  // version 2 Sends reserved beyond the first (continuation)
	// A continued reply being received (the completion goroutine):
	// its parts so far in asm, what the last RDMA2_REPLY_MIDDLE said
	// remains; assembled once the final part is in asm too.
	contActive, assembled bool
	asmRem                uint32
	asm                   []byte
	stream                []byte   // a continued call's Payload stream
	tbsn                  []uint32 // a send-based DDP call's segment numbers
	// A reply by send-based DDP across Sends (sddpgroup.go): receives
	// reserved (grpExtra) and held (grpRecv, completion goroutine), a
	// Send that broke the group (grpBad), the pieces located.
	grpExtra     int
	grpRecv      []heldPart
	grpBad       *XmitErr
	grpBufs      [][]byte
	grpVec       [][]byte
	one          [1][]byte // a placed result handed on (Call.KeepPlaced)
	contMR       verbs.MR  // slot-owned: the Sends of a continued call
	contWRs      []verbs.SendWR
	contSGEs     []verbs.SGE
	payMR, resMR verbs.MR // caller memory registered for this call
	// A reply in a responder-provided Read chunk (rprc_requester.go): pulled
	// into pullMR (slot-owned, local write only) by readWR; its receive
	// buffer already reposted (recvReposted).
	pullMR          verbs.MR
	readWR          verbs.SendWR
	pullSGE         [1]verbs.SGE
	readDone        chan struct{} // RDMA Read completed (cap 1)
	recvReposted    bool
	longMR, replyMR verbs.MR // slot-owned chunk buffers, registered once
	longOn, replyOn bool     // their STag is exposed for the current call

	reply sunrpc.Reply
	wr    verbs.SendWR // the call's Send
	invWR verbs.SendWR
	sge   [1]verbs.SGE
}

// Dial connects to the RPC-over-RDMA responder at addr ("host:port", NFS
// uses 20049) on dev and returns the requester end (RFC 8166 section 3,
// RFC 8797 private data). Its receives are posted before the connection
// request. Unless opts.MaxVersion is 1 or opts.Versions knows addr as
// version 1 only, it then negotiates the version (the draft's section 4.3,
// requester_negotiate.go): version 2 with our responders, version 1 (after ERR_VERS)
// with the others. Errors: the device's (ErrRejected, timeouts),
// ErrInvalid for bad options, ErrNoVersion2 when the negotiation got no
// answer, an *ErrorReply when it got an RDMA2_ERROR, ErrPropVal for the
// responder's bad properties.
func Dial(ctx context.Context, dev verbs.Device, addr string, opts ClientOptions) (*Client, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	// A responder known to speak version 1 only gets version 1's
	// buffers: send-based DDP, for which SendDDP enlarges them, is a
	// version 2 extension, and continued replies are version 2 too.
	v1 := opts.MaxVersion < Version2 || opts.Versions.Version1Only(addr)
	if v1 && opts.SendDDP {
		opts.Inline = min(opts.Inline, OurInline)
	}
	c := &Client{opts: opts, m: &opts.Metrics.m, lim: opts.Limits, remInv: !opts.NoRemoteInvalidate,
		byXID: make(map[uint32]int, opts.Credits), window: 1, done: make(chan struct{}), loopEnd: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			c.release()
		}
	}()
	var err error
	if c.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	n := opts.Credits
	// Receives: one per credit, and, when version 2 may be spoken,
	// MaxContinuation more for the parts of a continued reply.
	nrecv := n
	if !v1 {
		nrecv += MaxContinuation
	}
	if c.cq, err = dev.CreateCQ(5*n + 16 + nrecv - n); err != nil {
		return nil, err
	}
	c.cqd = cqDrain{cq: c.cq, complete: c.complete}
	if c.qp, err = c.pd.CreateQP(verbs.QPAttr{SendCQ: c.cq, RecvCQ: c.cq, MaxSendWR: 4*n + 4 + MaxContinuation, MaxRecvWR: nrecv, MaxSGE: 4}); err != nil {
		return nil, err
	}
	c.sq, _ = c.qp.(verbs.SendQueuer)
	if c.sendMR, err = c.reg(make([]byte, n*opts.Inline), 0); err != nil {
		return nil, err
	}
	c.recv = newRecvLayout(opts.Inline, opts.SendDDP)
	if c.recvMR, err = c.reg(c.recv.region(nrecv), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	c.slots = make([]slot, n)
	c.free = make([]int, 0, n)
	c.recvWRs, c.recvSGEs = make([]verbs.RecvWR, nrecv), make([]verbs.SGE, nrecv)
	for i := range c.recvWRs {
		c.recvSGEs[i] = c.recv.sge(c.recvMR, i)
		c.recvWRs[i] = verbs.RecvWR{ID: wrRecv | uint64(i), SGL: c.recvSGEs[i : i+1 : i+1]}
		if i >= n {
			if err := c.postRecv(i); err != nil {
				return nil, err
			}
			continue
		}
		s := &c.slots[i]
		s.c, s.idx = c, i
		s.done, s.inv, s.readDone = make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
		c.free = append(c.free, i)
		if err := c.postRecv(i); err != nil {
			return nil, err
		}
	}
	local := PrivateData{RemoteInvalidate: c.remInv, SendSize: opts.Inline, RecvSize: opts.Inline}
	pdata, err := local.Append(nil)
	if err != nil {
		return nil, err
	}
	c.info, err = dev.Connect(ctx, addr, c.qp, verbs.ConnParam{PrivateData: pdata, ResponderResources: opts.IRD, InitiatorDepth: opts.ORD})
	if err != nil {
		return nil, err
	}
	c.peer, _ = parsePrivateData(c.info.PrivateData)
	c.inline = inlineFor(local, c.peer, 1)
	c.vers = Version
	if !v1 {
		if err := c.negotiate(ctx, addr, local); err != nil {
			return nil, err
		}
		if c.vers == Version && opts.SendDDP && opts.Inline > OurInline {
			// The responder answered ERR_VERS (now in opts.Versions):
			// connect again with version 1's buffers rather than keep
			// larger receives posted for the life of the connection.
			c.opts.Logger.Info("rpcrdma: reconnecting with version 1 buffers", "peer", addr, "inline", OurInline)
			c.release()
			ok = true // released
			opts.MaxVersion = Version
			return Dial(ctx, dev, addr, opts)
		}
	}
	if _, err := planCall(Message{}, Message{}, c.inline); err != nil {
		return nil, err
	}
	c.opts.Logger.Info("rpcrdma: connected", "peer", addr, "version", c.vers, "inline_send", c.inline.Send, "inline_recv", c.inline.Recv)
	c.m.version.Store(int64(c.vers))
	c.m.connections.Add(1)
	lctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.loop(lctx)
	ok = true
	return c, nil
}

// Inline returns the connection's inline thresholds (RFC 8166 section
// 3.3.2) and Peer the responder's RFC 8797 private data (absentPrivateData
// when it sent none).
func (c *Client) Inline() Inline       { return c.inline }
func (c *Client) Peer() PrivateData    { return c.peer }
func (c *Client) Info() verbs.ConnInfo { return c.info }

// Version returns the connection's RPC-over-RDMA version: 2 when the
// responder answered the negotiation in version 2, else 1.
func (c *Client) Version() int { return int(c.vers) }

// Properties returns the responder's version 2 transport properties
// (DefaultProperties() values for those it did not send); zero on a
// version 1 connection.
func (c *Client) Properties() Properties { return c.props }

// advertised is our version 2 rdma_credit: receives ever posted, less the
// one held back for an RDMA2_GRANT (the draft's section 4.2.1: received
// messages plus receives posted, see the package doc's Version 2 section).
func (c *Client) advertised() uint32 { return c.posted.Load() - 1 }

// Credits returns the current credit window: min(Credits, the last grant).
func (c *Client) Credits() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.window
}

// Metrics returns a snapshot of the counters (of opts.Metrics when shared).
func (c *Client) Metrics() Metrics { return c.m.snapshot() }

// Dialer returns a sunrpc.DialFunc that dials addr with opts.
func Dialer(dev verbs.Device, addr string, opts ClientOptions) sunrpc.DialFunc {
	if opts.Metrics == nil {
		opts.Metrics = &ClientMetrics{}
	}
	return func(ctx context.Context) (sunrpc.ClientTransport, error) {
		c, err := Dial(ctx, dev, addr, opts)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

func (c *Client) postRecv(i int) error {
	err := c.qp.PostRecv(&c.recvWRs[i])
	if err == nil {
		c.posted.Add(1)
	}
	return err
}

// Done is closed when the connection is dead.
func (c *Client) Done() <-chan struct{} { return c.done }

// Close disconnects; outstanding RoundTrips return an error wrapping
// sunrpc.ErrConnLost.
func (c *Client) Close() error {
	c.fail(sunrpc.ErrClosed)
	<-c.loopEnd
	return nil
}

// fail marks the connection dead (first cause wins) and disconnects.
func (c *Client) fail(cause error) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	c.err = fmt.Errorf("%w: rpcrdma %v: %w", sunrpc.ErrConnLost, c.qp.RemoteAddr(), cause)
	ws := c.waiters
	c.waiters = nil
	c.mu.Unlock()
	c.opts.Logger.Debug("rpcrdma: connection lost", "peer", c.qp.RemoteAddr(), "err", cause)
	// the QP first: once Close returned, nothing is placed in the
	// callers' buffers any more (an RDMA Write of a reply in progress
	// has ended), so that a call the callers retransmit over another
	// connection into the same buffers is not written by this one too
	c.qp.Close()
	for _, w := range ws {
		close(w.ch)
	}
	close(c.done)
	c.cancel()
}

// release frees everything the connection registered; slots still held
// by a RoundTrip free their buffers when they are put back, and the last
// one put back frees the send and receive buffer pools (a RoundTrip still
// encodes into its send buffer, or returns a reply in its receive buffer,
// after the connection died: a closed region must not be used, since the
// provider may hand it out again).
func (c *Client) release() {
	if c.qp != nil {
		c.qp.Close()
	}
	c.mu.Lock()
	c.freed = true
	for _, i := range c.free {
		c.slots[i].deregOwned()
	}
	if c.inUse == 0 {
		c.deregPoolsLocked()
	}
	c.mu.Unlock()
	if c.cq != nil {
		c.cq.Close()
	}
	if c.pd != nil {
		c.pd.Close()
	}
}

// loop is the connection's completion goroutine: it waits on the CQ
// (no busy polling), matches replies to calls by XID and fails the
// connection on an error completion or when the QP leaves RTS. When the
// CQ takes a handler (verbs.CQHandler), replies are matched by the
// provider's goroutine that received them, which wakes the caller
// directly (cqDrain), and this goroutine handles the rest.
func (c *Client) loop(ctx context.Context) {
	defer close(c.loopEnd)
	defer c.m.connections.Add(-1)
	defer c.release()
	go func() {
		select {
		case <-c.qp.Done():
			c.fail(c.qp.Err())
		case <-ctx.Done():
		}
	}()
	if err := c.cqd.run(ctx, nil); err != nil {
		c.fail(err)
	}
	c.settleAbandoned()
}

// settleAbandoned frees the slots of calls whose RoundTrip returned
// before their reply, once the connection is dead.
func (c *Client) settleAbandoned() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.slots {
		if s := &c.slots[i]; s.state == slotAbandoned {
			s.state = slotFree
			c.putSlotLocked(i)
		}
	}
}

// complete handles one completion; it never stops the drain (a failed
// one fails the connection, whose Wait then ends).
func (c *Client) complete(wc *verbs.WC) bool {
	c.handle(wc)
	return true
}

func (c *Client) handle(wc *verbs.WC) {
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCFlushErr {
			c.opts.Logger.Warn("rpcrdma: work request failed", "status", wc.Status, "opcode", wc.Opcode, "err", wc.Err)
		}
		c.fail(fmt.Errorf("%v %v: %w", wc.Opcode, wc.Status, wc.Err))
		return
	}
	idx := int(wc.ID &^ wrKindMask)
	switch wc.ID & wrKindMask {
	case wrInv:
		if idx < len(c.slots) {
			c.slots[idx].inv <- struct{}{}
		}
		return
	case wrRead:
		if idx < len(c.slots) {
			c.slots[idx].readDone <- struct{}{}
		}
		return
	case wrDone:
		c.doneSent(idx)
		return
	case wrRecv:
	default:
		return
	}
	if idx >= len(c.recvWRs) {
		return
	}
	msg := c.recv.buf(c.recvMR, idx)[:wc.ByteLen]
	if len(msg) < 4 {
		c.m.badReplies.Add(1)
		c.repost(idx)
		return
	}
	if c.vers == Version2 && (c.control2(msg) || c.replyMiddle(msg)) {
		c.repost(idx)
		return
	}
	if c.vers == Version2 {
		if is, repost := c.replySDDPMiddle(idx, msg); is {
			if repost {
				c.repost(idx)
			}
			return
		}
	}
	xid := be.Uint32(msg)
	c.mu.Lock()
	si, ok := c.byXID[xid]
	if ok {
		delete(c.byXID, xid)
	} else {
		c.m.unmatched.Add(1)
	}
	c.mu.Unlock()
	if !ok {
		c.orphanRead(msg)
		c.repost(idx)
		return
	}
	s := &c.slots[si]
	if c.vers == Version2 {
		s.hdrLen, s.decodeErr = s.rep.Decode2(msg, &c.lim)
		if s.contActive {
			s.endContinued(msg)
		}
	} else {
		s.hdrLen, s.decodeErr = s.rep.Decode(msg, &c.lim)
	}
	s.recvIdx, s.recvLen = idx, len(msg)
	s.recvReposted = false
	s.invKey = 0
	if wc.Flags&verbs.WCWithInv != 0 {
		s.invKey = wc.InvalidatedKey
		c.m.sendInv.Add(1)
	}
	if s.decodeErr == nil {
		c.grant(s.rep.Credits)
	}
	c.mu.Lock()
	if s.state != slotAbandoned {
		s.done <- struct{}{} // cap 1, empty: does not block
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	// Its caller is gone: invalidate what stays exposed and free it; a
	// responder-provided Read chunk is notified unread (the rprc draft's
	// section 4.1.3).
	if s.decodeErr == nil && s.rep.Vers == Version2 && s.rep.HType == HTypeReplyRead {
		c.queueDone(s.rep.XID, s.rep.Reads[0].Handle, s.rep.InvHandle)
	}
	s.invalidateAsync()
	c.repost(idx)
	s.dropGroupRecv()
	c.mu.Lock()
	s.state = slotFree
	c.putSlotLocked(si)
	c.mu.Unlock()
}

func (c *Client) repost(idx int) {
	if err := c.postRecv(idx); err != nil {
		c.fail(err)
	}
}

// control2 handles a version 2 message that answers no call: RDMA2_GRANT
// updates the credit limit; RDMA2_CONNPROP_* after negotiation and
// messages too short for the prefix are silently discarded. It reports
// whether msg was such a message (its receive is then reposted).
func (c *Client) control2(msg []byte) bool {
	if len(msg) < PrefixLen {
		c.m.badReplies.Add(1)
		return true
	}
	switch HType(be.Uint32(msg[12:])) {
	case HTypeGrant:
		if be.Uint32(msg[4:]) == Version2 {
			c.m.grants.Add(1)
			c.grant(be.Uint32(msg[8:]))
		}
		return true
	case HTypeConnPropMiddle, HTypeConnPropFinal:
		return true
	}
	return false
}

// deregPoolsLocked deregisters the send and receive buffer pools, once
// release ran and no slot is held.
func (c *Client) deregPoolsLocked() {
	c.dereg(c.sendMR)
	c.dereg(c.recvMR)
	c.dereg(c.dq.mr)
	c.sendMR, c.recvMR, c.dq.mr = nil, nil, nil
}

// RoundTrip sends call and waits for its reply (sunrpc.ClientTransport).
// It waits for a credit first (RFC 8166 section 3.3.1), chooses chunks with
// planCall, registers the caller's memory for them, and before returning
// invalidates and deregisters every registration of the call (unless the
// responder invalidated it with Send With Invalidate). Errors:
// sunrpc.ErrConnLost (wrapped) when the connection died, ctx's error, an
// *ErrorReply (ERR_VERS, ERR_CHUNK) for RDMA_ERROR, ErrChunk when the reply
// does not match the chunks offered, ErrInvalid for a call too large.
func (c *Client) RoundTrip(ctx context.Context, call *sunrpc.Call) (*sunrpc.Reply, error) {
	si, err := c.acquire(ctx)
	if err != nil {
		return nil, err
	}
	s := &c.slots[si]
	if err := s.send(call); err != nil {
		s.dropRegs()
		s.dropGroupRecv()
		if errors.Is(err, verbs.ErrQPState) {
			// the QP failed before the completion loop noticed: that is
			// connection loss, and the call may be retried on a new one
			c.fail(err)
		}
		c.mu.Lock()
		delete(c.byXID, call.XID)
		s.state = slotFree
		if !s.posted {
			c.unsendLocked()
			c.sent -= uint32(s.extraSends)
		}
		c.putSlotLocked(si)
		dead := c.dead
		c.mu.Unlock()
		if dead {
			return nil, c.err
		}
		return nil, err
	}
	select {
	case <-s.done:
		return s.finish(ctx, call)
	case <-ctx.Done():
		return nil, s.abandon(call, fmt.Errorf("rpcrdma: %w", ctx.Err()))
	case <-c.done:
		return nil, s.abandon(call, c.err)
	}
}

// unsendLocked gives back the version 2 Send counted for a call that was
// not posted.
func (c *Client) unsendLocked() {
	if c.vers == Version2 {
		c.sent--
	}
}

// abandon gives up on the call: caller memory is deregistered now (a late
// RDMA access by the responder then fails); the credit stays held until
// the reply arrives or the connection dies.
func (s *slot) abandon(call *sunrpc.Call, err error) error {
	c := s.c
	// Drop the caller's registrations first, while the slot is still
	// slotBusy: only this goroutine frees a busy slot, so the completion
	// loop cannot free it (and a new RoundTrip cannot take it and register
	// its own payMR/resMR) before this is done. Once the slot is marked
	// abandoned below and c.mu released, it may be freed and reused at any
	// moment, so s.payMR/s.resMR must not be touched after that. If the
	// reply raced in, finish's dropCallerRegs finds them nil and skips them.
	s.dropCallerRegs()
	c.mu.Lock()
	select {
	case <-s.done: // the reply raced in
		c.mu.Unlock()
		r, e := s.finish(abandonedCtx, call)
		if e == nil {
			r.Release()
		}
		return err
	default:
	}
	s.state = slotAbandoned
	if c.dead {
		delete(c.byXID, s.xid)
		s.state = slotFree
		c.putSlotLocked(s.idx)
	}
	c.mu.Unlock()
	return err
}

// send plans, registers, encodes and posts the call.
func (s *slot) send(call *sunrpc.Call) error {
	c := s.c
	m := &call.Msg
	cm := Message{Head: len(m.Head), Tail: len(m.Tail)}
	if m.HasPayload {
		cm.Payload, cm.DDP = len(m.Payload), true
	}
	maxRep := call.MaxReplySize
	if maxRep <= 0 {
		maxRep = c.opts.MaxReply
	}
	rm := Message{Head: xdr.RoundUp(maxRep)}
	if call.ReplyPayload != nil {
		rm.Payload, rm.DDP = len(call.ReplyPayload), true
	}
	p, err := planCall(cm, rm, c.inline)
	if err != nil {
		return err
	}
	c.unboundedReply(call, &p)
	s.grpRecv, s.grpBad = s.grpRecv[:0], nil
	if call.ReplyPayload != nil {
		s.replyGroupPlan(&p, len(call.ReplyPayload))
	}
	h := &s.hdr
	*h = Header{XID: call.XID, Vers: c.vers, Credits: uint32(c.opts.Credits), Proc: p.Proc,
		Reads: s.readSeg[:0], Writes: s.writes[:0], Reply: s.replySeg[:0]}
	if c.vers == Version2 {
		h.Credits = c.advertised()
		h.HType = HTypeCallInline
		if p.Proc == ProcNoMsg {
			h.HType = HTypeCallExternal
		}
	}
	s.invKey = 0
	s.posted = false
	s.extraSends = 0
	s.contActive, s.assembled = false, false
	var sends, mid int // > 1: a continued call (the draft's section 6.6.2)
	if p.Call == CallLong && c.vers == Version2 && !c.opts.NoContinuation {
		// Continuation rather than a Call chunk, when it takes at most
		// MaxContinuation Sends and the responder's credits allow them
		// now. The final header is at most the plan's, less the Read
		// list (the reply's chunks are the same).
		sends, mid = contPlan(m.Len(), p.HeaderMax, c.inline.Send)
		c.mu.Lock()
		if sends <= 1 || sends > MaxContinuation || !c.reserveSendsLocked(sends-1) {
			sends = 0
		}
		c.mu.Unlock()
		if sends > 1 {
			s.extraSends = sends - 1
			p.Call, p.Proc = CallInline, ProcMsg
			h.HType, h.Proc = HTypeCallInline, ProcMsg
		}
	}
	if c.sddp && sends <= 1 && (p.Call == CallReadChunk || p.Call == CallInline && len(m.Payload) >= PageSize) && s.fitsSDDP(m, p.HeaderMax) {
		// Send-based DDP instead of the Read chunk, or of the argument
		// inline, when the call fits the responder's structure
		// (sddp_requester.go).
		p.Call = callSDDP
	} else if c.sddp && c.opts.SendDDPGroups && sends <= 1 && p.Call == CallReadChunk && !c.opts.NoContinuation {
		// An argument larger than the window: a transmission group of
		// Sends whose windows hold it (sddpgroup.go), when the
		// responder's credits allow them now; else the Read chunk.
		if g := s.planSDDPGroup(m, p.HeaderMax); g > 1 {
			c.mu.Lock()
			if c.reserveSendsLocked(g - 1) {
				sends, s.extraSends, p.Call = g, g-1, callSDDPGroup
			}
			c.mu.Unlock()
		}
	}
	switch p.Call {
	case CallReadChunk:
		mr, err := c.reg(m.Payload, verbs.AccessRemoteRead)
		if err != nil {
			return err
		}
		s.payMR = mr
		c.m.registrations.Add(1)
		h.Reads = append(h.Reads, ReadSegment{Position: p.ReadPos, Segment: Segment{Handle: mr.RKey(), Length: uint32(p.ReadLen), Offset: mr.Addr()}})
		c.m.readChunks.Add(1)
		c.m.readChunkBytes.Add(uint64(p.ReadLen))
	case CallLong:
		if err := s.ensure(&s.longMR, p.ReadLen, verbs.AccessRemoteRead); err != nil {
			return err
		}
		s.longOn = true
		b := m.AppendTo(s.longMR.Bytes()[:0])
		h.Reads = append(h.Reads, ReadSegment{Position: 0, Segment: Segment{Handle: s.longMR.RKey(), Length: uint32(len(b)), Offset: s.longMR.Addr()}})
		c.m.posZero.Add(1)
		c.m.readChunkBytes.Add(uint64(len(b)))
	}
	switch p.Reply {
	case ReplyWriteChunk:
		mr, err := c.reg(call.ReplyPayload, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			return err
		}
		s.resMR = mr
		c.m.registrations.Add(1)
		s.writeSeg[0] = Segment{Handle: mr.RKey(), Length: uint32(p.WriteLen), Offset: mr.Addr()}
		h.Writes = append(h.Writes, s.writeSeg[:1])
	case ReplyLong:
		if err := s.ensure(&s.replyMR, p.ReplyLen, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
			return err
		}
		s.replyOn = true
		h.Reply = append(h.Reply, Segment{Handle: s.replyMR.RKey(), Length: uint32(p.ReplyLen), Offset: s.replyMR.Addr()})
	}
	if c.vers == Version2 && c.remInv {
		h.InvHandle = soleHandle(h) // the draft's section 6.5
	}
	if sends > 1 {
		s.xid = call.XID
		if err := s.register(call.XID); err != nil {
			return err
		}
		c.m.calls.Add(1)
		if p.Call == callSDDPGroup {
			return s.sendSDDPGroup(m, h, sends)
		}
		return s.sendContinued(m, h, sends, mid)
	}
	buf := c.sendMR.Bytes()[s.idx*c.opts.Inline:][:c.opts.Inline]
	var b []byte
	if p.Call == callSDDP {
		b, err = s.encodeSDDP(m, h, buf)
	} else {
		b, err = h.Encode(buf[:0])
	}
	if err != nil {
		return err
	}
	switch p.Call {
	case CallInline:
		b = m.AppendTo(b)
		c.m.inlineMsgs.Add(1)
	case CallReadChunk:
		b = append(append(b, m.Head...), m.Tail...)
		c.m.inlineMsgs.Add(1)
	case callSDDP:
		c.m.inlineMsgs.Add(1)
	}
	if len(b) > c.inline.Send || len(b) > len(buf) || &b[0] != &buf[0] {
		return fmt.Errorf("%w: call of %d bytes exceeds the inline threshold %d", ErrInvalid, len(b), c.inline.Send)
	}
	c.m.inlineBytes.Add(uint64(len(b)))
	s.xid = call.XID
	if err := s.register(call.XID); err != nil {
		return err
	}
	c.m.calls.Add(1)
	s.sge[0] = c.sendMR.SGE(s.idx*c.opts.Inline, len(b))
	s.wr = verbs.SendWR{ID: wrSend | uint64(s.idx), Opcode: verbs.WRSend, SGL: s.sge[:]}
	s.posted = true
	if c.vers != Version2 {
		return c.qp.PostSend(&s.wr)
	}
	if c.sq == nil {
		c.sendMu.Lock()
		defer c.sendMu.Unlock()
		return c.qp.PostSend(&s.wr)
	}
	// Queued under sendMu, written after it: the calls of other callers
	// queued meanwhile leave in the same write (verbs.SendQueuer).
	c.sendMu.Lock()
	err = c.sq.QueueSend(&s.wr)
	c.sendMu.Unlock()
	if err == nil {
		c.sq.PushSends()
	}
	return err
}

// register records the call xid of slot s as outstanding, for its reply.
func (s *slot) register(xid uint32) error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return c.err
	}
	if _, dup := c.byXID[xid]; dup {
		// A retransmission on this connection (sunrpc RetryPolicy.Timeout)
		// while the first transmission is outstanding: its reply would
		// echo the first transmission's chunks. As Linux xprtrdma
		// (xprt_rdma_timer), disconnect: the call is retransmitted on a
		// new connection.
		c.mu.Unlock()
		c.fail(errRetransmit)
		c.mu.Lock()
		return c.err
	}
	c.byXID[xid] = s.idx
	return nil
}

// finish checks the reply against the call's chunks and returns it, after
// invalidating and deregistering the call's registrations. ctx bounds the
// pull of a responder-provided Read chunk (finishRead).
func (s *slot) finish(ctx context.Context, call *sunrpc.Call) (*sunrpc.Reply, error) {
	c := s.c
	if s.decodeErr == nil && s.rep.Vers == Version2 && s.rep.HType == HTypeReplyRead {
		return s.finishRead(ctx, call)
	}
	c.m.replies.Add(1)
	err := s.checkReply()
	s.dropCallerRegs()
	s.invalidateSync()
	if err != nil {
		s.releaseRecv()
		return nil, err
	}
	r := &s.reply
	*r = sunrpc.Reply{Placed: -1, Owner: s}
	if len(s.hdr.Writes) > 0 && len(s.rep.Writes) > 0 {
		r.Placed = int(chunkLen(s.rep.Writes[0]))
		c.m.writeChunks.Add(1)
		c.m.writeChunkBytes.Add(uint64(r.Placed))
	}
	if s.rep.Vers == Version2 && s.rep.HType == HTypeReplySDDP {
		if err := s.takeSDDP(call, r); err != nil {
			s.releaseRecv()
			return nil, err
		}
	} else if s.rep.Proc == ProcNoMsg {
		n := int(chunkLen(s.rep.Reply))
		r.Body = s.replyMR.Bytes()[:n]
		c.m.replyChunks.Add(1)
		c.m.replyChunkBytes.Add(uint64(n))
	} else if s.assembled {
		r.Body = s.asm
		c.m.continued.Add(1)
	} else {
		r.Body = c.recv.buf(c.recvMR, s.recvIdx)[s.hdrLen:s.recvLen]
	}
	return r, nil
}

func (s *slot) checkReply() error {
	c := s.c
	if s.decodeErr != nil {
		c.m.badReplies.Add(1)
		return fmt.Errorf("rpcrdma: reply to XID %#x: %w", s.xid, s.decodeErr)
	}
	if s.rep.Vers == Version2 && s.rep.HType == HTypeXmitErr {
		c.m.xmitErrs.Add(1)
		xe := s.rep.XmitErr
		return fmt.Errorf("rpcrdma: call XID %#x: %w", s.xid, &xe)
	}
	if s.rep.Vers == Version2 && s.rep.HType == HTypeError {
		c.m.countError2(s.rep.Err.Code)
		return &ErrorReply{XID: s.xid, Vers: Version2, Code2: s.rep.Err.Code, Err2: s.rep.Err}
	}
	if s.rep.Proc == ProcError {
		if s.rep.Errcode == ErrcodeVers {
			c.m.errVers.Add(1)
		} else {
			c.m.errChunk.Add(1)
		}
		return &ErrorReply{XID: s.xid, Code: s.rep.Errcode, VersLow: s.rep.VersLow, VersHigh: s.rep.VersHigh}
	}
	if s.rep.Vers == Version2 && s.rep.HType == HTypeReplySDDP && !c.sddpLocal() {
		c.m.badReplies.Add(1)
		return fmt.Errorf("rpcrdma: reply to XID %#x: %w: RDMA2_REPLY_SDDP without our RDMA2_PROPID_RBSTRUCT", s.xid, ErrChunk)
	}
	if s.rep.Vers == Version2 && s.rep.HType != HTypeReplyInline && s.rep.HType != HTypeReplyExternal && s.rep.HType != HTypeReplySDDP {
		c.m.badReplies.Add(1)
		return fmt.Errorf("rpcrdma: reply to XID %#x: %w: %v is not a reply", s.xid, ErrChunk, s.rep.HType)
	}
	if err := s.rep.CheckReply(&s.hdr); err != nil {
		c.m.badReplies.Add(1)
		return fmt.Errorf("rpcrdma: reply to XID %#x: %w", s.xid, err)
	}
	if s.rep.Proc == ProcNoMsg {
		if err := s.rep.CheckXID(s.replyMR.Bytes()[:chunkLen(s.rep.Reply)]); err != nil {
			c.m.badReplies.Add(1)
			return fmt.Errorf("rpcrdma: reply chunk: %w", err)
		}
	}
	return nil
}

// invalidateSync invalidates the slot-owned STags of the call and waits
// for the local invalidates to complete (not those the responder
// invalidated remotely).
func (s *slot) invalidateSync() {
	c := s.c
	for _, x := range []struct {
		on *bool
		mr verbs.MR
	}{{&s.longOn, s.longMR}, {&s.replyOn, s.replyMR}} {
		if !*x.on {
			continue
		}
		*x.on = false
		if x.mr.RKey() == s.invKey {
			continue
		}
		s.invWR = verbs.SendWR{ID: wrInv | uint64(s.idx), Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateKey: x.mr.RKey()}
		if err := c.qp.PostSend(&s.invWR); err != nil {
			continue // the QP is dead: closing it invalidates everything
		}
		select {
		case <-s.inv:
		case <-c.done:
		}
	}
}

func (s *slot) releaseRecv() {
	c := s.c
	if !s.recvReposted {
		c.repost(s.recvIdx)
	}
	s.dropGroupRecv()
	c.mu.Lock()
	s.state = slotFree
	c.putSlotLocked(s.idx)
	c.mu.Unlock()
}

// ReleaseReply gives the reply's receive buffer back (reposted) and its
// credit (sunrpc.Releaser).
func (s *slot) ReleaseReply(r *sunrpc.Reply) {
	r.Body, r.PlacedVec = nil, nil
	s.releaseRecv()
}

var errRetransmit = errors.New("rpcrdma: retransmission on the same connection: reconnecting")

var errKeepalive = errors.New("rpcrdma: keepalive NULL call timed out")

// KeepAlive makes a NULL call (procedure 0 of prog/vers, e.g. NFS 100003
// v3) every interval until the connection dies or ctx ends, and fails the
// connection (outstanding RoundTrips get sunrpc.ErrConnLost) when one gets
// no reply within timeout: a peer that disappeared without closing TCP.
// It calls even when the connection is busy (not only when idle).
func (c *Client) KeepAlive(ctx context.Context, prog, vers uint32, interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	xid := rand.Uint32() // its own XID space, apart from the caller's
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.done:
			return
		case <-t.C:
		}
		xid++
		var e xdr.Encoder
		for _, v := range []uint32{xid, 0, 2, prog, vers, 0, 0, 0, 0, 0} {
			e.Uint32(v)
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		r, err := c.RoundTrip(cctx, &sunrpc.Call{XID: xid, Msg: sunrpc.Message{Head: e.Bytes()}, MaxReplySize: 256})
		cancel()
		if err == nil {
			r.Release()
			continue
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			c.fail(errKeepalive)
			return
		}
	}
}

// soleHandle returns the R_key of h's chunks when they all use one (0
// otherwise): the handle a version 2 call offers for Remote Invalidation
// (the draft's section 6.5). Linux svcrdma likewise invalidates only when
// a call names a single R_key.
func soleHandle(h *Header) uint32 {
	var key uint32
	see := func(k uint32) bool {
		if key != 0 && k != key {
			return false
		}
		key = k
		return true
	}
	for _, r := range h.Reads {
		if !see(r.Handle) {
			return 0
		}
	}
	for _, w := range h.Writes {
		for _, s := range w {
			if !see(s.Handle) {
				return 0
			}
		}
	}
	for _, s := range h.Reply {
		if !see(s.Handle) {
			return 0
		}
	}
	return key
}
