package rpcrdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Tests of responder-provided Read chunks (the rprc draft) between our
// requester and responder, and against raw peers, over software iWARP.

// longCall calls pLong for n bytes of (non-DDP) result with the reply
// bound maxReply, unbounded when the caller cannot bound it.
func longCall(ctx context.Context, c *sunrpc.Client, n uint32, maxReply int, unbounded bool) ([]byte, error) {
	var res []byte
	err := c.Call(ctx, sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pLong,
		Args:         func(b *sunrpc.Builder) { b.Uint32(n) },
		Results:      func(d *xdr.Decoder, _ int) error { res = append([]byte(nil), d.Opaque(8<<20)...); return d.Err() },
		MaxReplySize: maxReply, UnboundedReply: unbounded})
	return res, err
}

// srvConns returns the responder's connections.
func (ts *testSrv) srvConns() []*srvConn {
	ts.srv.mu.Lock()
	defer ts.srv.mu.Unlock()
	var out []*srvConn
	for c := range ts.srv.conns {
		out = append(out, c)
	}
	return out
}

// waitExposed waits until no responder connection has a Read chunk
// exposed (or quarantined), or fails after 3 s.
func (ts *testSrv) waitExposed(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		n := 0
		for _, c := range ts.srvConns() {
			n += c.exposedCount()
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Read chunks exposed, want %d", n, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRPRCReplies: replies too large for the requester's reply resources
// come in responder-provided Read chunks (section 4.1.1), are pulled and
// notified (4.1.2), by Send With Invalidate when both peers announce
// Remote Invalidation and by Send otherwise (4.1.4); the responder
// invalidates each on its notification; small replies stay inline and
// adequate Reply chunks are used.
func TestRPRCReplies(t *testing.T) {
	for _, tc := range []struct {
		name               string
		cliNoInv, srvNoInv bool
		wantInv            bool
	}{{"send-with-invalidate", false, false, true}, {"send/requester-no-inv", true, false, false}, {"send/responder-no-inv", false, true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, ServerOptions{Credits: 8, NoRemoteInvalidate: tc.srvNoInv})
			c, cm := newClient(t, ts, ClientOptions{Credits: 8, NoRemoteInvalidate: tc.cliNoInv})
			ctx := tctx(t, 30*time.Second)
			reads := 0
			for _, k := range []struct {
				n         int
				maxReply  int
				unbounded bool
				read      bool
			}{
				{100, 100000, true, false},   // unbounded, small: inline, no Reply chunk
				{4000, 100000, true, false},  // at the inline threshold: either
				{8000, 100000, true, true},   // unbounded: no Reply chunk, a Read chunk
				{200003, 300000, true, true}, // large
				{1 << 20, 2 << 20, true, true},
				{8000, 100, false, true},   // underestimated, no Reply chunk: Read chunk (MUST, 4.1.1)
				{8000, 5000, false, true},  // Reply chunk too short: Read chunk (MUST, 4.1.1)
				{8000, 9000, false, false}, // Reply chunk adequate: used
			} {
				if tc.cliNoInv {
					// A responder naming rdma_inv_handle anyway: the
					// requester, which did not announce Remote
					// Invalidation, still notifies by Send.
					for _, sc := range ts.srvConns() {
						sc.exp.mu.Lock()
						sc.exp.remInv = true
						sc.exp.mu.Unlock()
					}
				}
				before := cm.Metrics()
				got, err := longCall(ctx, c, uint32(k.n), k.maxReply, k.unbounded)
				if err != nil || !bytes.Equal(got, pattern(k.n, 5)) {
					t.Fatalf("%+v: %d bytes, %v", k, len(got), err)
				}
				m := cm.Metrics()
				read := m.ReplyReadChunks - before.ReplyReadChunks
				if k.n == 4000 {
					k.read = read == 1 // the boundary: either is right
				}
				if (read == 1) != k.read || read > 1 {
					t.Fatalf("%+v: %d replies in Read chunks", k, read)
				}
				if k.unbounded && m.ReplyChunks != before.ReplyChunks {
					t.Fatalf("%+v: a Reply chunk was offered for an unbounded reply", k)
				}
				if read == 1 {
					reads++
				}
			}
			ts.waitExposed(t, 0)
			testenv.Eventually(t, 10*time.Second, "the counters", func() bool { return ts.srv.Metrics().PullDone == uint64(reads) })
			m, sm := cm.Metrics(), ts.srv.Metrics()
			if m.ReplyReadChunks != uint64(reads) || sm.ReplyReadChunks != uint64(reads) || m.PullDone != uint64(reads) || sm.PullDone != uint64(reads) ||
				sm.PullDoneDropped != 0 || sm.ReadChunkTimeouts != 0 || m.Registrations != 0 || m.CreditsInUse != 0 || m.BadReplies != 0 {
				t.Fatalf("%d Read chunks\nclient %+v\nserver %+v", reads, m, sm)
			}
			var inv int
			for _, sc := range ts.srvConns() {
				sc.exp.mu.Lock()
				inv += sc.exp.remoteInvalidated
				sc.exp.mu.Unlock()
			}
			if tc.wantInv && inv != reads || !tc.wantInv && inv != 0 {
				t.Fatalf("%d of %d notifications by Send With Invalidate, want all: %v", inv, reads, tc.wantInv)
			}
		})
	}
}

// TestRPRCWriteChunkKept: a DDP-eligible result still goes into the
// requester's Write chunk when the rest of the reply comes in a Read
// chunk (section 4.1).
func TestRPRCWriteChunkKept(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 4})
	const prog = 0x20000079
	ts.rpc.Register(prog, 1, []sunrpc.Handler{func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		res.Opaque(pattern(9000, 7))
		res.Payload(givePattern[:50000])
		return nil
	}})
	c, cm := newClient(t, ts, ClientOptions{Credits: 4})
	ctx := tctx(t, 10*time.Second)
	buf := make([]byte, 50000)
	var head []byte
	placed := -2
	err := c.Call(ctx, sunrpc.CallSpec{Prog: prog, Vers: 1, Proc: 0,
		Results: func(d *xdr.Decoder, pl int) error {
			head = append([]byte(nil), d.Opaque(10000)...)
			placed = pl
			return d.Err()
		},
		ReplyPayload: buf, MaxReplySize: 100, UnboundedReply: true})
	if err != nil || !bytes.Equal(head, pattern(9000, 7)) || placed != 50000 || !bytes.Equal(buf, givePattern[:50000]) {
		t.Fatalf("placed %d, head %d bytes, %v", placed, len(head), err)
	}
	if m := cm.Metrics(); m.ReplyReadChunks != 1 || m.WriteChunks != 1 || m.ReplyReadBytes >= 50000 {
		t.Fatalf("%+v", m)
	}
}

// TestRPRCNotAnnounced: responder-provided Read chunks are used only when
// both peers announce them (section 6): with either end off, or on
// version 1, an unbounded call gets a Reply chunk, and a reply too large
// for the resources provided is continued or answered with the transport
// error (section 4.1.1: RDMA2_ERR_REPLY_RESOURCE, ERR_CHUNK).
func TestRPRCNotAnnounced(t *testing.T) {
	for _, tc := range []struct {
		name string
		srv  ServerOptions
		cli  ClientOptions
	}{
		{"requester-off", ServerOptions{}, ClientOptions{NoResponderReadChunks: true}},
		{"responder-off", ServerOptions{NoResponderReadChunks: true}, ClientOptions{}},
		{"version1", ServerOptions{MaxVersion: 1}, ClientOptions{}},
		{"version1-requester", ServerOptions{}, ClientOptions{MaxVersion: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.srv.Credits, tc.cli.Credits = 8, 8
			tc.cli.Versions = &VersionCache{}
			ts := startServer(t, tc.srv)
			c, cm := newClient(t, ts, tc.cli)
			ctx := tctx(t, 20*time.Second)
			got, err := longCall(ctx, c, 20000, 30000, true)
			if err != nil || !bytes.Equal(got, pattern(20000, 5)) {
				t.Fatalf("%d bytes, %v", len(got), err)
			}
			if m := cm.Metrics(); m.ReplyChunks != 1 || m.ReplyReadChunks != 0 {
				t.Fatalf("unbounded call without the extension: %+v", m)
			}
			_, err = longCall(ctx, c, 100000, 100, false)
			var er *ErrorReply
			if !errors.As(err, &er) || !errors.Is(err, ErrChunk) {
				t.Fatalf("reply larger than the resources provided: %v, want a permanent transport error", err)
			}
			if m, sm := cm.Metrics(), ts.srv.Metrics(); m.ReplyReadChunks != 0 || sm.ReplyReadChunks != 0 || sm.PullDone != 0 {
				t.Fatalf("client %+v\nserver %+v", m, sm)
			}
		})
	}
}

// TestRPRCRequesterWithout: a requester that did not announce the
// extension and receives a reply in a responder-provided Read chunk
// anyway notifies the responder and fails the call (section 4.1.3); the
// connection stays usable.
func TestRPRCRequesterWithout(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 4})
	ts.srv.forceRPRC = true
	c, cm := newClient(t, ts, ClientOptions{Credits: 4, NoResponderReadChunks: true})
	ctx := tctx(t, 10*time.Second)
	_, err := longCall(ctx, c, 8000, 100, false)
	if !errors.Is(err, ErrChunk) {
		t.Fatalf("error %v, want ErrChunk", err)
	}
	ts.waitExposed(t, 0)
	testenv.Eventually(t, 10*time.Second, "the counters", func() bool { return ts.srv.Metrics().PullDone == 1 })
	if sm := ts.srv.Metrics(); sm.PullDone != 1 || sm.ReplyReadChunks != 1 {
		t.Fatalf("server %+v", sm)
	}
	if got, err := longCall(ctx, c, 100, 200, false); err != nil || len(got) != 100 {
		t.Fatal(err)
	}
	if m := cm.Metrics(); m.ReplyReadChunks != 0 || m.PullDone != 1 || m.CreditsInUse != 0 {
		t.Fatalf("client %+v", m)
	}
}

// TestRPRCAbandoned: a call abandoned before its reply, which comes in a
// Read chunk, is notified without being pulled (section 4.1.3); the
// responder invalidates the chunk at once, not after the timeout.
func TestRPRCAbandoned(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 4})
	const prog = 0x2000007a
	ts.rpc.Register(prog, 1, []sunrpc.Handler{func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		time.Sleep(150 * time.Millisecond)
		res.Opaque(pattern(30000, 1))
		return nil
	}})
	c, cm := newClient(t, ts, ClientOptions{Credits: 4})
	ctx := tctx(t, 10*time.Second)
	if err := c.Null(ctx, tProg, tVers); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	err := c.Call(short, sunrpc.CallSpec{Prog: prog, Vers: 1, MaxReplySize: 100, UnboundedReply: true})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for ts.srv.Metrics().PullDone != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no RDMA2_DONE for the abandoned call: server %+v", ts.srv.Metrics())
		}
		time.Sleep(5 * time.Millisecond)
	}
	ts.waitExposed(t, 0)
	if got, err := longCall(ctx, c, 8000, 100, true); err != nil || !bytes.Equal(got, pattern(8000, 5)) {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the counters", func() bool { return ts.srv.Metrics().PullDone == 2 })
	m, sm := cm.Metrics(), ts.srv.Metrics()
	if m.ReplyReadChunks != 1 || m.PullDone != 2 || sm.PullDone != 2 || sm.ReadChunkTimeouts != 0 || m.CreditsInUse != 0 || m.Registrations != 0 {
		t.Fatalf("client %+v\nserver %+v", m, sm)
	}
}

// rawV2Reader is a raw version 2 requester that announces RPRCPull and
// can RDMA Read: it plays a requester that is slow, or never notifies.
type rawV2Reader struct {
	qp     verbs.QP
	cq     verbs.CQ
	rb, sb verbs.MR
	sink   verbs.MR
	t      *testing.T
}

func dialRawReader(t *testing.T, addr string, remInv bool) *rawV2Reader {
	t.Helper()
	d := newDev()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(64)
	qp, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, MaxRecvWR: 8, MaxSendWR: 16})
	if err != nil {
		t.Fatal(err)
	}
	rp := &rawV2Reader{qp: qp, cq: cq, t: t}
	rp.rb, _ = pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	rp.sb, _ = pd.RegMR(make([]byte, 4096), 0)
	rp.sink, _ = pd.RegMR(make([]byte, 64<<10), verbs.AccessLocalWrite)
	if err := qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rp.rb.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	p := defaultPrivateData()
	p.RemoteInvalidate = remInv
	pdata, _ := p.Append(nil)
	if _, err := d.Connect(tctx(t, 10*time.Second), addr, qp, verbs.ConnParam{PrivateData: pdata, ResponderResources: 4, InitiatorDepth: 4}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close(); cq.Close() })
	var pbuf [20]byte
	var rbuf [4]byte
	props := appendRPRCProp(DefaultProperties().AppendProps(nil, &pbuf), RPRCPull, &rbuf)
	h := decode2(t, rp.exchange(connProp(1, props)))
	if f, _ := parseRPRC(h.Props); h.HType != HTypeConnPropFinal || f&RPRCExpose == 0 {
		t.Fatalf("negotiation: %+v", h)
	}
	return rp
}

// next waits for the next completion.
func (rp *rawV2Reader) next() verbs.WC {
	rp.t.Helper()
	ctx := tctx(rp.t, 5*time.Second)
	var wc [1]verbs.WC
	for rp.cq.Poll(wc[:]) == 0 {
		if err := rp.cq.Wait(ctx); err != nil {
			rp.t.Fatal("no completion:", err)
		}
	}
	return wc[0]
}

// send Sends msg (by Send With Invalidate of inv when not 0), signaled.
func (rp *rawV2Reader) send(msg []byte, inv uint32) {
	rp.t.Helper()
	copy(rp.sb.Bytes(), msg)
	wr := &verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{rp.sb.SGE(0, len(msg))}}
	if inv != 0 {
		wr.Opcode, wr.InvalidateKey = verbs.WRSendWithInv, inv
	}
	if err := rp.qp.PostSend(wr); err != nil {
		rp.t.Fatal(err)
	}
}

// exchange sends msg and returns the next message received.
func (rp *rawV2Reader) exchange(msg []byte) []byte { return rp.exchangeInv(msg, 0) }

func (rp *rawV2Reader) exchangeInv(msg []byte, inv uint32) []byte {
	rp.t.Helper()
	rp.send(msg, inv)
	for {
		wc := rp.next()
		if wc.Status != verbs.WCSuccess {
			rp.t.Fatalf("%+v", wc)
		}
		if wc.Opcode == verbs.WCRecv {
			out := append([]byte(nil), rp.rb.Bytes()[:wc.ByteLen]...)
			rp.qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rp.rb.SGE(0, 4096)}})
			return out
		}
	}
}

// read RDMA Reads seg into the sink; it returns the completion.
func (rp *rawV2Reader) read(seg Segment) verbs.WC {
	rp.t.Helper()
	if err := rp.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{rp.sink.SGE(0, int(seg.Length))}, RemoteAddr: seg.Offset, RKey: seg.Handle}); err != nil {
		return verbs.WC{Status: verbs.WCFatalErr, Err: err}
	}
	for {
		wc := rp.next()
		if wc.Opcode == verbs.WCRDMARead || wc.Status != verbs.WCSuccess {
			return wc
		}
	}
}

// longCallMsg is an RDMA2_CALL_INLINE of pLong for n bytes, no chunks.
func longCallMsg(xid, n uint32) []byte {
	return words(cat(w(xid, 2, 8, uint32(HTypeCallInline), 0, 0, 0, 0), w(xid, 0, 2, tProg, tVers, pLong, 0, 0, 0, 0, n))...)
}

// doneMsg2 is an RDMA2_DONE.
func doneMsg2(xid, handle uint32) []byte { return appendDone(nil, xid, 8, handle) }

// TestRPRCTimeout: a requester that never notifies: the responder
// invalidates the Read chunk after ReadChunkTimeout (section 4.1.3), and
// a later RDMA Read of it is a remote access error that ends the
// connection; before the timeout it reads the reply.
func TestRPRCTimeout(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 8, ReadChunkTimeout: 100 * time.Millisecond})
	rp := dialRawReader(t, ts.srv.Addr().String(), true)
	h := decode2(t, rp.exchange(longCallMsg(0x70, 8000)))
	if h.HType != HTypeReplyRead || len(h.Reads) != 1 || h.Reads[0].Length != 8000+4+24 || h.InvHandle != h.Reads[0].Handle {
		t.Fatalf("reply %+v", h)
	}
	if wc := rp.read(h.Reads[0].Segment); wc.Status != verbs.WCSuccess || be.Uint32(rp.sink.Bytes()) != 0x70 {
		t.Fatalf("read before the timeout: %+v", wc)
	}
	time.Sleep(300 * time.Millisecond)
	if sm := ts.srv.Metrics(); sm.ReadChunkTimeouts != 1 || sm.PullDone != 0 {
		t.Fatalf("server %+v", sm)
	}
	wc := rp.read(h.Reads[0].Segment)
	if wc.Status == verbs.WCSuccess {
		t.Fatal("RDMA Read of an expired Read chunk succeeded")
	}
	select {
	case <-rp.qp.Done():
	case <-time.After(2 * time.Second):
		t.Fatalf("connection alive after a remote access error (%+v)", wc)
	}
}

// TestRPRCDoneRacesTimeout: notifications that arrive around the
// timeout, by Send and by Send With Invalidate: each is either matched
// (invalidated on it) or dropped (already expired), every one is answered
// with an RDMA2_GRANT, the connection survives, and every Read chunk is
// released exactly once.
func TestRPRCDoneRacesTimeout(t *testing.T) {
	const timeout = 30 * time.Millisecond
	ts := startServer(t, ServerOptions{Credits: 8, ReadChunkTimeout: timeout})
	for _, inv := range []bool{false, true} {
		t.Run(fmt.Sprintf("invalidate=%v", inv), func(t *testing.T) {
			rp := dialRawReader(t, ts.srv.Addr().String(), inv)
			before := ts.srv.Metrics()
			const rounds = 16
			for i := range uint32(rounds) {
				xid := 0x100 + i
				h := decode2(t, rp.exchange(longCallMsg(xid, 8000)))
				if h.HType != HTypeReplyRead {
					t.Fatalf("reply %+v", h)
				}
				if wc := rp.read(h.Reads[0].Segment); wc.Status != verbs.WCSuccess {
					t.Fatalf("read: %+v", wc)
				}
				// Around the timeout: from 20 to 40 ms after the reply.
				time.Sleep(timeout - 10*time.Millisecond + time.Duration(i)*time.Duration(20*time.Millisecond)/rounds)
				var key uint32
				if inv {
					key = h.InvHandle
				}
				g := decode2(t, rp.exchangeInv(doneMsg2(xid, h.Reads[0].Handle), key))
				if g.HType != HTypeGrant || g.XID != 0 {
					t.Fatalf("answer to RDMA2_DONE: %+v", g)
				}
			}
			// A call still works.
			if h := decode2(t, rp.exchange(longCallMsg(0x200, 100))); h.HType != HTypeReplyInline {
				t.Fatalf("%+v", h)
			}
			sm := ts.srv.Metrics()
			done, dropped, expired := sm.PullDone-before.PullDone, sm.PullDoneDropped-before.PullDoneDropped, sm.ReadChunkTimeouts-before.ReadChunkTimeouts
			t.Logf("matched %d, dropped %d, expired %d", done, dropped, expired)
			if done+dropped != rounds || done+expired != rounds {
				t.Fatalf("matched %d, dropped %d, expired %d of %d", done, dropped, expired, rounds)
			}
			ts.waitExposed(t, 0)
		})
	}
}

// TestRPRCBadInput: a notification for an unknown XID is dropped (section
// 4.1.3) and answered only with the credit (RDMA2_GRANT); a notification
// with no rdma_handle is RDMA2_ERR_BAD_XDR; an RDMA2_REPLY_READ sent to a
// responder is RDMA2_ERR_INVAL_HTYPE; the connection stays usable.
func TestRPRCBadInput(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 8})
	rp := dialRawReader(t, ts.srv.Addr().String(), false)
	if h := decode2(t, rp.exchange(longCallMsg(0x10, 100))); h.HType != HTypeReplyInline {
		t.Fatalf("%+v", h)
	}
	if g := decode2(t, rp.exchange(doneMsg2(0x999, 0x1234))); g.HType != HTypeGrant {
		t.Fatalf("answer to RDMA2_DONE for an unknown XID: %+v", g)
	}
	if e := decode2(t, rp.exchange(doneMsg2(0x998, 0)[:PrefixLen])); e.HType != HTypeError || e.Err.Code != Err2BadXDR || e.XID != 0x998 {
		t.Fatalf("answer to a short RDMA2_DONE: %+v", e)
	}
	rr := Header{XID: 0x997, Vers: 2, Credits: 8, Reads: []ReadSegment{{Segment: segA}}, Header2: Header2{HType: HTypeReplyRead}}
	b, err := rr.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := decode2(t, rp.exchange(b)); e.HType != HTypeError || e.Err.Code != Err2InvalHType {
		t.Fatalf("answer to RDMA2_REPLY_READ: %+v", e)
	}
	if h := decode2(t, rp.exchange(longCallMsg(0x11, 8000))); h.HType != HTypeReplyRead {
		t.Fatalf("%+v", h)
	}
	if sm := ts.srv.Metrics(); sm.PullDoneDropped != 1 || sm.PullDone != 0 {
		t.Fatalf("server %+v", sm)
	}
}

// TestRPRCInvalidatedOnDone: the responder invalidates a Read chunk when
// its notification arrives by Send (section 4.1.2): a Read after the
// RDMA2_DONE is a remote access error.
func TestRPRCInvalidatedOnDone(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 8})
	rp := dialRawReader(t, ts.srv.Addr().String(), false)
	h := decode2(t, rp.exchange(longCallMsg(0x80, 8000)))
	if h.HType != HTypeReplyRead || h.InvHandle != 0 {
		t.Fatalf("reply %+v (no Remote Invalidation announced: no rdma_inv_handle)", h)
	}
	if wc := rp.read(h.Reads[0].Segment); wc.Status != verbs.WCSuccess {
		t.Fatalf("read: %+v", wc)
	}
	if g := decode2(t, rp.exchange(doneMsg2(0x80, h.Reads[0].Handle))); g.HType != HTypeGrant {
		t.Fatalf("%+v", g)
	}
	ts.waitExposed(t, 0)
	if wc := rp.read(h.Reads[0].Segment); wc.Status == verbs.WCSuccess {
		t.Fatal("RDMA Read after RDMA2_DONE succeeded")
	}
}

// TestRPRCCreditOne: with a grant of one credit, each notification takes
// the requester's only credit; the RDMA2_GRANT answering it gives it back
// (section 5.2.3), so calls keep going one after the other.
func TestRPRCCreditOne(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 4, Grant: 1})
	c, cm := newClient(t, ts, ClientOptions{Credits: 4})
	ctx := tctx(t, 10*time.Second)
	for i := range 20 {
		n := 5000 + 1000*i
		if got, err := longCall(ctx, c, uint32(n), 100, true); err != nil || !bytes.Equal(got, pattern(n, 5)) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "the counters", func() bool { return cm.Metrics().Grants >= 20 })
	if m := cm.Metrics(); m.ReplyReadChunks != 20 || m.PullDone != 20 || m.CreditsInUse != 0 {
		t.Fatalf("client %+v", m)
	}
}

// TestRPRCForgottenXID: our requester, facing a raw responder, notifies
// an RDMA2_REPLY_READ whose XID it does not know (section 4.1.3) without
// pulling it: the RDMA2_DONE names the reply's XID and the chunk's first
// R_key, by plain Send (the requester announced no Remote Invalidation).
func TestRPRCForgottenXID(t *testing.T) {
	ctx := tctx(t, 10*time.Second)
	d := newDev()
	ln, err := d.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type dialed struct {
		c   *Client
		err error
	}
	dc := make(chan dialed, 1)
	cm := &ClientMetrics{}
	go func() {
		c, err := Dial(ctx, newDev(), ln.Addr().String(), ClientOptions{Credits: 4, Metrics: cm, Versions: &VersionCache{}, NoRemoteInvalidate: true})
		dc <- dialed{c, err}
	}()
	req, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(32)
	qp, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, MaxRecvWR: 4, MaxSendWR: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	rb, _ := pd.RegMR(make([]byte, 4*4096), verbs.AccessLocalWrite)
	sb, _ := pd.RegMR(make([]byte, 4096), 0)
	for i := range 4 {
		qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rb.SGE(i*4096, 4096)}})
	}
	pdata, _ := defaultPrivateData().Append(nil)
	if _, err := req.Accept(ctx, qp, verbs.ConnParam{PrivateData: pdata, ResponderResources: 4, InitiatorDepth: 4}); err != nil {
		t.Fatal(err)
	}
	recv := func() Header {
		t.Helper()
		var wc [1]verbs.WC
		for {
			for cq.Poll(wc[:]) == 0 {
				if err := cq.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if wc[0].Status != verbs.WCSuccess {
				t.Fatalf("%+v", wc[0])
			}
			if wc[0].Opcode == verbs.WCRecv {
				break
			}
		}
		i := int(wc[0].ID)
		h := decode2(t, append([]byte(nil), rb.Bytes()[i*4096:][:wc[0].ByteLen]...))
		qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rb.SGE(i*4096, 4096)}})
		return h
	}
	send := func(h Header) {
		t.Helper()
		b, err := h.Encode(sb.Bytes()[:0])
		if err != nil {
			t.Fatal(err)
		}
		if err := qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.SGE(0, len(b))}}); err != nil {
			t.Fatal(err)
		}
	}
	cp := recv()
	if f, err := parseRPRC(cp.Props); cp.HType != HTypeConnPropFinal || err != nil || f != RPRCPull {
		t.Fatalf("requester's properties %+v: RDMA2_PROPID_RPRC %#x, %v", cp.Props, f, err)
	}
	var pbuf [20]byte
	var rbuf [4]byte
	send(Header{XID: cp.XID, Vers: 2, Credits: 4, Header2: Header2{HType: HTypeConnPropFinal,
		Props: appendRPRCProp(DefaultProperties().AppendProps(nil, &pbuf), RPRCExpose|RPRCRemoteInv, &rbuf)}})
	r := <-dc
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	if !r.c.rprc || r.c.rprcInv {
		t.Fatalf("extension %v, by Send With Invalidate %v; want on, by Send", r.c.rprc, r.c.rprcInv)
	}
	send(Header{XID: 0xdead, Vers: 2, Credits: 4, Reads: []ReadSegment{{Segment: segB}},
		Header2: Header2{HType: HTypeReplyRead, InvHandle: segB.Handle}})
	done := recv()
	if done.HType != HTypeDone || done.XID != 0xdead || done.Handle != segB.Handle {
		t.Fatalf("answer to an RDMA2_REPLY_READ of an unknown XID: %+v", done)
	}
	if m := cm.Metrics(); m.PullDone != 1 || m.UnmatchedReplies != 1 || m.ReplyReadChunks != 0 {
		t.Fatalf("%+v", m)
	}
}

// TestRPRCConcurrent: many callers at once, replies in Read chunks and
// inline mixed, with fewer credits than callers: the notifications go
// within the credits beside the calls, none is lost, every chunk is
// released and every credit given back.
func TestRPRCConcurrent(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 8, Grant: 4})
	c, cm := newClient(t, ts, ClientOptions{Credits: 8})
	ctx := tctx(t, 30*time.Second)
	errs := make(chan error, 16)
	for g := range 16 {
		go func() {
			for i := range 20 {
				n := (g*7919 + i*104729) % 40000
				got, err := longCall(ctx, c, uint32(n), 100, true)
				if err == nil && !bytes.Equal(got, pattern(n, 5)) {
					err = fmt.Errorf("call %d/%d: wrong %d bytes", g, i, n)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ts.waitExposed(t, 0)
	m := cm.Metrics()
	testenv.Eventually(t, 10*time.Second, "the counters", func() bool { return ts.srv.Metrics().PullDone == m.ReplyReadChunks })
	if sm := ts.srv.Metrics(); m.ReplyReadChunks == 0 || m.PullDone != m.ReplyReadChunks || sm.ReplyReadChunks != m.ReplyReadChunks ||
		sm.PullDoneDropped != 0 || m.CreditsInUse != 0 || m.BadReplies != 0 || sm.ReadChunkTimeouts != 0 {
		t.Fatalf("client %+v\nserver %+v", m, sm)
	}
}

// TestRPRCBadProperty: an RDMA2_PROPID_RPRC value that is not one uint32
// is RDMA2_ERR_BAD_PROPVAL (the version 2 draft's section 5.1), and
// nothing is applied.
func TestRPRCBadProperty(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 4})
	var pbuf [20]byte
	props := append(DefaultProperties().AppendProps(nil, &pbuf), Prop{Which: PropRPRC, Data: []byte{0, 0, 0, 1, 0, 0, 0, 0}})
	_, got := dialV2(t, ts.srv.Addr().String(), connProp(0x50, props))
	if h := decode2(t, got); h.HType != HTypeError || h.Err.Code != Err2BadPropVal || h.XID != 0x50 {
		t.Fatalf("answer to a bad RDMA2_PROPID_RPRC: %+v", h)
	}
	for _, sc := range ts.srvConns() {
		if sc.rprcOn() {
			t.Fatal("responder-provided Read chunks on after a bad property")
		}
	}
}

// TestRPRCPullCancelled: a caller whose context ends while the RDMA Read
// of a responder-provided Read chunk is in flight gets the context's
// error without waiting for the Read; the Read completes in the
// background, the responder is notified all the same (RDMA2_DONE, the
// rprc draft's section 4.1.3) and invalidates without its timeout, the
// slot and credit come back, and the next call is pulled normally. A
// context ended before the pull starts reads nothing and notifies.
func TestRPRCPullCancelled(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 4})
	ctx := tctx(t, 20*time.Second)
	cm := &ClientMetrics{}
	tr, c := dialOne(ctx, t, ts, ClientOptions{Credits: 4, Metrics: cm})
	for i, k := range []struct {
		name  string
		hook  func(cancel context.CancelFunc) func()
		reads uint64 // RDMA Reads posted
	}{
		{"read-in-flight", func(cancel context.CancelFunc) func() { return func() { cancel() } }, 1},
	} {
		cctx, cancel := context.WithCancel(ctx)
		posted := 0
		hook := k.hook(cancel)
		tr.pullPosted = func() { posted++; hook() }
		_, err := longCall(cctx, c, 30000, 100, true)
		cancel()
		tr.pullPosted = nil
		if !errors.Is(err, context.Canceled) || posted != int(k.reads) {
			t.Fatalf("%s: error %v after %d Reads posted, want context.Canceled after %d", k.name, err, posted, k.reads)
		}
		testenv.Eventually(t, 5*time.Second, "RDMA2_DONE of the cancelled pull", func() bool { return ts.srv.Metrics().PullDone == uint64(i+1) })
		ts.waitExposed(t, 0)
		testenv.Eventually(t, 5*time.Second, "the credit back", func() bool { return cm.Metrics().CreditsInUse == 0 })
	}
	if got, err := longCall(ctx, c, 8000, 100, true); err != nil || !bytes.Equal(got, pattern(8000, 5)) {
		t.Fatal(err)
	}
	m, sm := cm.Metrics(), ts.srv.Metrics()
	if m.ReplyReadChunks != 1 || sm.ReadChunkTimeouts != 0 || m.Registrations != 0 {
		t.Fatalf("client %+v\nserver %+v", m, sm)
	}
}
