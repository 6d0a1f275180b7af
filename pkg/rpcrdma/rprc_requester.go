package rpcrdma

import (
	"context"
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// The requester's side of responder-provided Read chunks (the rprc
// draft): a call whose reply cannot be bounded (sunrpc.Call.UnboundedReply)
// is sent without a Reply chunk; a reply that comes as RDMA2_REPLY_READ is
// pulled with RDMA Reads into a slot-owned region (registered for local
// writes only) and the responder is told with an RDMA2_DONE, by Send With
// Invalidate of the R_key it named when both peers announced Remote
// Invalidation. RDMA2_DONE is a Send like any other: it goes within the
// responder's credit, before waiting calls, and the responder answers it
// with an RDMA2_GRANT.

// maxPull bounds the responder-provided Read chunk a requester pulls, in
// bytes; a larger one is not pulled (the call fails with ErrChunk) but
// notified.
const maxPull = 64 << 20

// doneBufLen is the send buffer of one RDMA2_DONE.
const doneBufLen = 32

// doneMsg is an RDMA2_DONE waiting for a credit or a buffer.
type doneMsg struct {
	xid, handle uint32
	inv         bool // by Send With Invalidate of handle
}

// doneQueue holds a requester's RDMA2_DONE messages: those waiting, and
// the send buffers (one per credit) of those in flight.
type doneQueue struct {
	mr      verbs.MR
	free    []int
	pending []doneMsg
	wrs     []verbs.SendWR
	sges    []verbs.SGE
}

// rprcLocal is the PropRPRC value a requester announces: RPRCPull, when
// not turned off and the connection lets it issue RDMA Reads (ORD).
func (c *Client) rprcLocal() uint32 {
	if c.opts.NoResponderReadChunks || c.info.ORD < 1 {
		return 0
	}
	return RPRCPull
}

// setupRPRC applies the responder's PropRPRC value peer and, when the
// extension is used, registers the RDMA2_DONE buffers.
func (c *Client) setupRPRC(peer uint32) error {
	c.rprc = c.rprcLocal()&RPRCPull != 0 && peer&RPRCExpose != 0
	c.rprcInv = c.rprc && c.remInv && peer&RPRCRemoteInv != 0
	return c.setupDones()
}

func (c *Client) setupDones() error {
	if c.dq.mr != nil {
		return nil
	}
	n := c.opts.Credits
	mr, err := c.reg(make([]byte, n*doneBufLen), 0)
	if err != nil {
		return err
	}
	c.dq.mr = mr
	c.dq.free = make([]int, n)
	for i := range n {
		c.dq.free[i] = i
	}
	c.dq.wrs, c.dq.sges = make([]verbs.SendWR, n), make([]verbs.SGE, n)
	c.pullSem = make(chan struct{}, max(c.info.ORD, 1))
	return nil
}

// unboundedReply turns the plan p of call into one without a Reply chunk
// when the call's reply cannot be bounded and the responder returns such
// replies in Read chunks (the rprc draft's section 5.3.1).
func (c *Client) unboundedReply(call *sunrpc.Call, p *CallPlan) {
	if call.UnboundedReply && c.rprc && p.Reply == ReplyLong {
		p.Reply, p.ReplyLen = ReplyInline, 0
		p.HeaderMax -= replyChunkHdr(c.inline.segs())
	}
}

// queueDone queues the pull completion notification for reply xid's
// Read chunk, whose first segment is handle and whose reply named inv
// in rdma_inv_handle, and sends what credits allow.
func (c *Client) queueDone(xid, handle, inv uint32) {
	c.mu.Lock()
	if c.dead || c.dq.mr == nil {
		c.mu.Unlock()
		return
	}
	c.dq.pending = append(c.dq.pending, doneMsg{xid: xid, handle: handle, inv: c.rprcInv && inv != 0 && inv == handle})
	c.mu.Unlock()
	c.flushDones()
}

// flushDones sends the waiting RDMA2_DONE messages that a credit and a
// buffer allow (calls wait meanwhile: canTakeLocked), then wakes the
// calls waiting for a credit. The credits are taken under mu, the Sends
// posted under sendMu alone (never both held: a continued call posts its
// Sends under sendMu, and takes mu before).
func (c *Client) flushDones() {
	q := &c.dq
	for {
		var ready [8]doneMsg
		var bufs [8]int
		n := 0
		c.mu.Lock()
		for n < len(ready) && len(q.pending) > 0 && len(q.free) > 0 && !c.dead && int32(c.limit-c.sent) > 0 {
			ready[n] = q.pending[0]
			q.pending = q.pending[1:]
			bufs[n] = q.free[len(q.free)-1]
			q.free = q.free[:len(q.free)-1]
			c.sent++
			n++
		}
		if n == 0 {
			c.mu.Unlock()
			return
		}
		more := n == len(ready)
		c.mu.Unlock()
		var err error
		c.sendMu.Lock()
		for i, d := range ready[:n] {
			bi := bufs[i]
			b := appendDone(q.mr.Bytes()[bi*doneBufLen:bi*doneBufLen], d.xid, c.advertised(), d.handle)
			q.sges[bi] = q.mr.SGE(bi*doneBufLen, len(b))
			wr := &q.wrs[bi]
			*wr = verbs.SendWR{ID: wrDone | uint64(bi), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: q.sges[bi : bi+1 : bi+1]}
			if d.inv {
				wr.Opcode, wr.InvalidateKey = verbs.WRSendWithInv, d.handle
			}
			// counted before it is posted, so that a peer that has
			// seen it finds it counted
			c.m.dones.Add(1)
			if err = c.qp.PostSend(wr); err != nil {
				c.m.dones.Add(^uint64(0))
				break
			}
		}
		c.sendMu.Unlock()
		if err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		if len(q.pending) == 0 {
			c.wakeLocked()
		}
		c.mu.Unlock()
		if !more {
			return
		}
	}
}

// doneSent takes back the buffer of an RDMA2_DONE whose Send completed.
func (c *Client) doneSent(bi int) {
	c.mu.Lock()
	c.dq.free = append(c.dq.free, bi)
	more := len(c.dq.pending) > 0
	c.mu.Unlock()
	if more {
		c.flushDones()
	}
}

// orphanRead handles, in the completion goroutine, a reply msg that
// matched no call: an RDMA2_REPLY_READ for an XID forgotten is notified
// all the same (the rprc draft's section 4.1.3), without pulling.
func (c *Client) orphanRead(msg []byte) {
	if c.vers != Version2 || len(msg) < PrefixLen || HType(be.Uint32(msg[12:])) != HTypeReplyRead {
		return
	}
	h := &c.orphan
	if _, err := h.Decode2(msg, &c.lim); err != nil {
		return
	}
	c.queueDone(h.XID, h.Reads[0].Handle, h.InvHandle)
}

// finishRead ends the call of slot s whose reply is an RDMA2_REPLY_READ
// (decoded in s.rep): it pulls the Read chunk into the slot's pull region
// with RDMA Reads (within the connection's ORD), notifies the responder
// (whether the Reads succeeded or not, section 4.1.2) and returns the
// reply. A requester that did not announce RPRCPull notifies and fails
// the call (section 4.1.3). Errors wrap ErrChunk (a reply that does not
// match the call, a chunk larger than maxPull or not starting with the
// call's XID) or sunrpc.ErrConnLost.
//
// ctx bounds the pull: ended before a Read is posted, nothing more is
// read; ended while one is in flight, the caller gets ctx's error at
// once and the Read is left to complete in the background (the pull
// region and the responder's R_key stay valid until it does). Either
// way the responder is notified, as for a reply to a forgotten XID
// (section 4.1.3), and the slot is freed once no Read is in flight.
func (s *slot) finishRead(ctx context.Context, call *sunrpc.Call) (*sunrpc.Reply, error) {
	c := s.c
	c.m.replies.Add(1)
	rep := &s.rep
	s.dropCallerRegs()
	s.invalidateSync()
	// The receive buffer holds nothing the caller needs: reposted now,
	// so that the RDMA2_DONE's rdma_credit counts it for the RDMA2_GRANT
	// that answers.
	c.repost(s.recvIdx)
	s.recvReposted = true
	handle, inv := rep.Reads[0].Handle, rep.InvHandle
	fail := func(err error) (*sunrpc.Reply, error) {
		c.queueDone(rep.XID, handle, inv)
		c.m.badReplies.Add(1)
		s.releaseRecv()
		return nil, fmt.Errorf("rpcrdma: reply to XID %#x: %w", s.xid, err)
	}
	if !c.rprc {
		return fail(fmt.Errorf("%w: a responder-provided Read chunk, which this connection did not announce", ErrChunk))
	}
	if err := rep.checkReplyRead(&s.hdr, maxPull); err != nil {
		return fail(err)
	}
	n := int(readChunkLen(rep.Reads))
	if err := s.ensure(&s.pullMR, max(n, 4), verbs.AccessLocalWrite); err != nil {
		return fail(err)
	}
	off := 0
	for _, rs := range rep.Reads {
		if rs.Length == 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		select {
		case c.pullSem <- struct{}{}:
		case <-c.done:
			return fail(c.err)
		case <-ctx.Done():
			return fail(ctx.Err())
		}
		s.pullSGE[0] = s.pullMR.SGE(off, int(rs.Length))
		s.readWR = verbs.SendWR{ID: wrRead | uint64(s.idx), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: s.pullSGE[:1], RemoteAddr: rs.Offset, RKey: rs.Handle}
		err := c.qp.PostSend(&s.readWR)
		if err == nil && c.pullPosted != nil {
			c.pullPosted()
		}
		if err == nil && ctx.Err() != nil {
			// a caller already gone does not wait for the Read
			c.m.badReplies.Add(1)
			go s.pullAbandoned(rep.XID, handle, inv)
			return nil, fmt.Errorf("rpcrdma: reply to XID %#x: %w", s.xid, ctx.Err())
		}
		if err == nil {
			select {
			case <-s.readDone:
			case <-c.done:
				err = c.err
			case <-ctx.Done():
				c.m.badReplies.Add(1)
				go s.pullAbandoned(rep.XID, handle, inv)
				return nil, fmt.Errorf("rpcrdma: reply to XID %#x: %w", s.xid, ctx.Err())
			}
		}
		<-c.pullSem
		if err != nil {
			return fail(err)
		}
		off += int(rs.Length)
	}
	body := s.pullMR.Bytes()[:n]
	if err := rep.CheckXID(body); err != nil {
		return fail(err)
	}
	c.queueDone(rep.XID, handle, inv)
	c.m.replyReads.Add(1)
	c.m.replyReadBytes.Add(uint64(n))
	r := &s.reply
	*r = sunrpc.Reply{Placed: -1, Owner: s, Body: body}
	if len(s.hdr.Writes) > 0 && len(rep.Writes) > 0 {
		r.Placed = int(chunkLen(rep.Writes[0]))
		c.m.writeChunks.Add(1)
		c.m.writeChunkBytes.Add(uint64(r.Placed))
	}
	return r, nil
}

// pullAbandoned finishes, in the background, a pull whose caller went
// away while an RDMA Read was in flight: once the Read completes (or the
// connection dies, flushing it) it notifies the responder with
// RDMA2_DONE (the rprc draft's section 4.1.3: a requester notifies even
// for a reply it no longer wants; notifying earlier would invalidate the
// R_key under the Read) and frees the slot.
func (s *slot) pullAbandoned(xid, handle, inv uint32) {
	c := s.c
	select {
	case <-s.readDone:
	case <-c.done:
	}
	<-c.pullSem
	c.queueDone(xid, handle, inv)
	s.releaseRecv()
}

// abandonedCtx is the context of a call abandoned by its caller whose
// reply raced in: already ended, so a responder-provided Read chunk in
// that reply is notified but not pulled.
var abandonedCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()
