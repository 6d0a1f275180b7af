package rpcrdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// TestVersionPairings: our requester and responder in every pairing of
// versions, over software iWARP: the version negotiated (the draft's
// section 4.3), what each end reports, and calls of each kind on it.
func TestVersionPairings(t *testing.T) {
	for _, tc := range []struct {
		client, server, want int
	}{{2, 2, 2}, {2, 1, 1}, {1, 2, 1}, {1, 1, 1}} {
		t.Run(fmt.Sprintf("client%d-server%d", tc.client, tc.server), func(t *testing.T) {
			ts := startServer(t, ServerOptions{Credits: 8, MaxVersion: tc.server})
			vc := &VersionCache{}
			cm := &ClientMetrics{}
			addr := ts.srv.Addr().String()
			ctx := tctx(t, 20*time.Second)
			c, err := Dial(ctx, newDev(), addr, ClientOptions{Credits: 8, MaxVersion: tc.client, Versions: vc, Metrics: cm})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.Version() != tc.want {
				t.Fatalf("negotiated version %d, want %d", c.Version(), tc.want)
			}
			if m := cm.Metrics(); m.Version != int64(tc.want) {
				t.Fatalf("client metrics Version %d", m.Version)
			}
			rc, err := sunrpc.NewClient(func(context.Context) (sunrpc.ClientTransport, error) { return c, nil }, sunrpc.ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if err := rc.Null(ctx, tProg, tVers); err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{100, 16 << 10} { // inline; a Position-zero Read chunk and a Reply chunk
				arg := pattern(n, n)
				got, _, err := call(ctx, rc, pEcho, arg, false, 0, nil, n+64)
				if err != nil || !bytes.Equal(got, arg) {
					t.Fatalf("echo of %d bytes: %d bytes back, %v", n, len(got), err)
				}
			}
			n := 200000 // a Read chunk and a Write chunk
			arg := pattern(n, 9)
			if got, placed, err := call(ctx, rc, pEchoDDP, arg, true, 0, make([]byte, n), 512); err != nil || placed != n || !bytes.Equal(got, arg) {
				t.Fatalf("DDP echo: placed %d, %v", placed, err)
			}
			cs := ts.srv.Connections()
			if len(cs) != 1 || cs[0].Version != tc.want {
				t.Fatalf("server connections %+v, want version %d", cs, tc.want)
			}
			fellBack := tc.client == 2 && tc.server == 1
			if vc.Version1Only(addr) != fellBack {
				t.Fatalf("version cache says version 1 only: %v", vc.Version1Only(addr))
			}
			if m := cm.Metrics(); (m.Version1Fallbacks == 1) != fellBack || (m.ErrVers == 1) != fellBack && tc.client == 2 {
				t.Fatalf("client metrics %+v", m)
			}
			if !fellBack {
				return
			}
			// A reconnection goes straight to version 1: no second
			// negotiation (the draft's section 4.3.2), no ERR_VERS.
			before := ts.srv.Metrics().ErrVers
			c2, err := Dial(ctx, newDev(), addr, ClientOptions{Credits: 8, Versions: vc, Metrics: cm})
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			if c2.Version() != 1 || ts.srv.Metrics().ErrVers != before || cm.Metrics().Version1Fallbacks != 1 {
				t.Fatalf("reconnection: version %d, server ERR_VERS %d -> %d, fallbacks %d", c2.Version(), before, ts.srv.Metrics().ErrVers, cm.Metrics().Version1Fallbacks)
			}
		})
	}
}

// TestVersion2Properties: the transport properties each end announced are
// applied: the requester's inline thresholds follow the responder's
// receive buffers and send size.
func TestVersion2Properties(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 4, Inline: 8192})
	ctx := tctx(t, 10*time.Second)
	c, err := Dial(ctx, newDev(), ts.srv.Addr().String(), ClientOptions{Credits: 4, Inline: 16384, Versions: &VersionCache{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.Properties()
	if c.Version() != 2 || p.SendSize != 8192 || p.RecvSize != 8192 || p.Reverse != ReverseNone || p.MaxSegs != DefaultMaxChunkSegments {
		t.Fatalf("version %d, responder properties %+v", c.Version(), p)
	}
	if in := c.Inline(); in.Send != 8192 || in.Recv != 8192 || in.Vers != 2 {
		t.Fatalf("inline thresholds %+v, want 8192 both ways", in)
	}
}

// rawV2 is a raw version 2 peer: it negotiates, then sends what a test
// gives and decodes what comes back.
type rawV2 struct {
	*rawPeer
	t *testing.T
}

func dialV2(t *testing.T, addr string, first []byte) (*rawV2, []byte) {
	rp := &rawV2{dialRaw(t, addr), t}
	return rp, rp.exchange(t, first)
}

func connProp(xid uint32, props []Prop) []byte {
	h := Header{XID: xid, Vers: 2, Credits: 3, Header2: Header2{HType: HTypeConnPropFinal, Props: props}}
	b, err := h.Encode(nil)
	if err != nil {
		panic(err)
	}
	return b
}

func decode2(t *testing.T, b []byte) Header {
	t.Helper()
	var h Header
	if _, err := h.Decode2(b, nil); err != nil {
		t.Fatalf("% x: %v", b, err)
	}
	return h
}

// TestVersion2ResponderErrors: malformed or unacceptable version 2
// messages are answered with the RDMA2_ERROR the draft names (section 7),
// rdma_xid and rdma_vers copied; the connection stays usable.
func TestVersion2ResponderErrors(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 4, MaxCall: 1 << 20,
		Limits: Limits{MaxWriteChunks: 2, MaxChunkSegments: 3}})
	addr := ts.srv.Addr().String()
	var pbuf [20]byte
	good := DefaultProperties().AppendProps(nil, &pbuf)
	rp, got := dialV2(t, addr, connProp(0x10, good))
	if h := decode2(t, got); h.HType != HTypeConnPropFinal || h.XID != 0x10 || len(h.Props) < 5 {
		t.Fatalf("answer to RDMA2_CONNPROP_FINAL: %+v", h)
	}
	nullCall := func(xid uint32) []uint32 { return w(xid, 0, 2, tProg, tVers, 0, 0, 0, 0, 0) }
	for _, c := range []struct {
		name string
		msg  []byte
		want Error2
		vers uint32
	}{
		{"unknown-htype", words(0x21, 2, 3, 3), Error2{Code: Err2InvalHType}, 2},
		{"reply-htype", words(0x22, 2, 3, uint32(HTypeReplyInline), 0), Error2{Code: Err2InvalHType}, 2},
		{"bad-xdr", words(0x23, 2, 3, 10, 0, 2, 0, 0), Error2{Code: Err2BadXDR}, 2},
		{"xid-differs", words(cat(w(0x24, 2, 3, 10, 0, 0, 0, 0), nullCall(0x25))...), Error2{Code: Err2BadXDR}, 2},
		{"connprop-after-final", connProp(0x26, good), Error2{Code: Err2InvalCont}, 2},
		{"version-1-on-version-2", words(cat(w(0x27, 1, 3, 0, 0, 0, 0), nullCall(0x27))...), Error2{Code: Err2VersMismatch}, 1},
		{"version-3", words(0x28, 3, 3, 10, 0, 0, 0, 0), Error2{Code: Err2Vers, VersLow: 1, VersHigh: 2}, 3},
		{"two-read-chunks", words(cat(w(0x29, 2, 3, 10, 0), w(1, 4), hloo(segA), w(1, 8), hloo(segB), w(0, 0, 0), nullCall(0x29))...), Error2{Code: Err2ReadChunks, MaxChunks: 1}, 2},
		{"three-write-chunks", words(cat(w(0x2a, 2, 3, 10, 0, 0), w(1, 0, 1, 0, 1, 0, 0), w(0), nullCall(0x2a))...), Error2{Code: Err2WriteChunks, MaxChunks: 2}, 2},
		{"four-segments", words(cat(w(0x2b, 2, 3, 10, 0, 0, 1, 4), hloo(segA), hloo(segA), hloo(segA), hloo(segA), w(0, 0), nullCall(0x2b))...), Error2{Code: Err2Segments, MaxSegments: 3}, 2},
		{"read-chunk-past-max-call", words(cat(w(0x2c, 2, 3, 10, 0, 1, 40), hloo(Segment{Handle: 1, Length: 2 << 20}), w(0, 0, 0), nullCall(0x2c))...), Error2{Code: Err2System}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := rp.exchange(t, c.msg)
			h := decode2(t, fixVers(got))
			if h.HType != HTypeError || h.XID != be.Uint32(c.msg) || be.Uint32(got[4:]) != c.vers || h.Err != c.want {
				t.Fatalf("answer % x: %+v, want %+v with rdma_vers %d", got, h.Err, c.want, c.vers)
			}
		})
	}
	// And a good call still works.
	got = rp.exchange(t, words(cat(w(0x30, 2, 3, 10, 0, 0, 0, 0), nullCall(0x30))...))
	if h := decode2(t, got); h.HType != HTypeReplyInline || h.XID != 0x30 {
		t.Fatalf("reply %+v", h)
	}
	// A bad property value in the first message: RDMA2_ERR_BAD_PROPVAL,
	// and nothing applied; a good FINAL afterwards is accepted.
	rp2, got := dialV2(t, addr, connProp(0x40, []Prop{{Which: PropRecvSize, Data: []byte{0, 1}}}))
	if h := decode2(t, got); h.HType != HTypeError || h.Err.Code != Err2BadPropVal || h.XID != 0x40 {
		t.Fatalf("answer to a bad property: %+v", h)
	}
	if h := decode2(t, rp2.exchange(t, connProp(0x41, good))); h.HType != HTypeConnPropFinal {
		t.Fatalf("answer to a good RDMA2_CONNPROP_FINAL: %+v", h)
	}
	m := ts.srv.Metrics()
	for _, code := range []Errcode2{Err2InvalHType, Err2BadXDR, Err2InvalCont, Err2VersMismatch, Err2Vers, Err2ReadChunks, Err2WriteChunks, Err2Segments, Err2System, Err2BadPropVal} {
		if m.Errors2[code] == 0 {
			t.Errorf("%v not counted: %v", code, m.Errors2)
		}
	}
}

// fixVers makes an RDMA2_ERROR that echoes another rdma_vers decodable.
func fixVers(b []byte) []byte {
	b = append([]byte(nil), b...)
	if len(b) >= 8 {
		be.PutUint32(b[4:], 2)
	}
	return b
}

// TestVersion2RequesterErrors: the requester understands the resource
// errors a version 2 responder sends for a reply that does not fit
// (the draft's sections 6.6.4, 7.3.4, 7.3.5), and the connection stays
// usable. Without responder-provided Read chunks, which would carry the
// long reply.
func TestVersion2RequesterErrors(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	c, cm := newClient(t, ts, ClientOptions{NoResponderReadChunks: true})
	ctx := tctx(t, 10*time.Second)
	_, _, err := call(ctx, c, pGive, nil, false, 100000, make([]byte, 5000), 256)
	var er *ErrorReply
	if !errors.As(err, &er) || er.Vers != 2 || er.Code2 != Err2WriteResource || er.Err2.ChunkIndex != 1 || er.Err2.LengthNeeded != 100000 || !errors.Is(err, ErrChunk) {
		t.Fatalf("error %v, want RDMA2_ERR_WRITE_RESOURCE for chunk 1, 100000 bytes", err)
	}
	// A reply larger than the requester expected (no Reply chunk): sent
	// in Continued format when it takes at most MaxContinuation Sends,
	// else RDMA2_ERR_REPLY_RESOURCE with the length needed.
	got, _, err := call(ctx, c, pLong, nil, false, 8000, nil, 100)
	if err != nil || !bytes.Equal(got, pattern(8000, 5)) {
		t.Fatalf("continued reply: %d bytes, %v", len(got), err)
	}
	if _, _, err = call(ctx, c, pLong, nil, false, 100000, nil, 100); !errors.As(err, &er) || er.Code2 != Err2ReplyResource || er.Err2.LengthNeeded < 100000 {
		t.Fatalf("error %v, want RDMA2_ERR_REPLY_RESOURCE", err)
	}
	if got, _, err := call(ctx, c, pEcho, []byte("ok"), false, 0, nil, 256); err != nil || string(got) != "ok" {
		t.Fatal(got, err)
	}
	if m := cm.Metrics(); m.Errors2[Err2WriteResource] != 1 || m.Errors2[Err2ReplyResource] != 1 || m.Continued != 1 || m.Registrations != 0 || m.CreditsInUse != 0 {
		t.Fatalf("client metrics %+v", m)
	}
}

// TestErrorReplyIs: each RDMA2_ERR_* a requester receives matches the
// sentinel of its kind.
func TestErrorReplyIs(t *testing.T) {
	for code, want := range map[Errcode2]error{
		Err2Vers: ErrVers, Err2BadXDR: ErrChunk, Err2BadPropVal: ErrPropVal, Err2InvalHType: ErrHType, Err2InvalCont: ErrCont,
		Err2ReadChunks: ErrReadChunks, Err2WriteChunks: ErrWriteChunks, Err2Segments: ErrSegments,
		Err2WriteResource: ErrChunk, Err2ReplyResource: ErrChunk, Err2VersMismatch: ErrVersMismatch,
	} {
		e := &ErrorReply{Vers: 2, Code2: code}
		if !errors.Is(e, want) || e.Error() == "" {
			t.Errorf("%v does not match %v", code, want)
		}
	}
	if e := (&ErrorReply{Vers: 2, Code2: Err2System}); errors.Is(e, ErrChunk) || errors.Is(e, ErrVers) {
		t.Error("RDMA2_ERR_SYSTEM matches a sentinel")
	}
}

// TestVersion2CreditsEnforced: a version 2 requester that sends past the
// rdma_credit it was given loses its connection, as a version 1 requester
// sending past its grant finds no receive.
func TestVersion2CreditsEnforced(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 4, Grant: 2})
	ts.delay.Store(int64(300 * time.Millisecond))
	var pbuf [20]byte
	rp, got := dialV2(t, ts.srv.Addr().String(), connProp(1, DefaultProperties().AppendProps(nil, &pbuf)))
	h := decode2(t, got)
	// Before its first call a connection is granted 1: with the
	// negotiation message, 2 Sends.
	if h.Credits != 2 {
		t.Fatalf("credit after the negotiation %d, want 2", h.Credits)
	}
	// Two calls: the second lands in the receive kept for an
	// RDMA2_GRANT, past the credit. (Receives for both replies: it is
	// the responder that must end the connection.)
	for i := uint64(2); i < 4; i++ {
		if err := rp.qp.PostRecv(&verbs.RecvWR{ID: i, SGL: []verbs.SGE{rp.rb.SGE(0, 4096)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := uint32(0); i < 2; i++ {
		msg := words(cat(w(0x100+i, 2, 3, 10, 0, 0, 0, 0), w(0x100+i, 0, 2, tProg, tVers, pCount, 0, 0, 0, 0))...)
		copy(rp.sb.Bytes()[256*i:], msg)
		if err := rp.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{rp.sb.SGE(int(256*i), len(msg))}}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-rp.qp.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the connection survived Sends past its credit")
	}
}

// TestVersion2Continuation: calls and replies larger than the inline
// threshold travel as several Sends (the draft's section 6.6.2) when no
// chunk carries them, sizes around the fragment boundaries, many at once
// (the parts of different messages never interleave), with the data
// checked; NoContinuation sends the same calls in Call chunks.
func TestVersion2Continuation(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 16})
	// Replies are continued when no responder-provided Read chunk
	// carries them.
	c, cm := newClient(t, ts, ClientOptions{Credits: 16, NoResponderReadChunks: true})
	ctx := tctx(t, 30*time.Second)
	sizes := []int{4000, 4073, 4096, 8150, 8200, 20000, 40000, 60000}
	var wg sync.WaitGroup
	errs := make(chan error, 8*len(sizes))
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, n := range sizes {
				arg := pattern(n, g+n)
				// Call continued (no Call chunk); the reply comes in the
				// Reply chunk offered (MaxReplySize n+64).
				got, _, err := call(ctx, c, pEcho, arg, false, 0, nil, n+64)
				if err != nil || !bytes.Equal(got, arg) {
					errs <- fmt.Errorf("echo %d: %d bytes, %v", n, len(got), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Replies continued: no Reply chunk offered (MaxReplySize 100), one
	// at a time (continued replies are sent only within the requester's
	// credits; past them, RDMA2_ERR_REPLY_RESOURCE).
	for _, n := range sizes {
		got, _, err := call(ctx, c, pLong, nil, false, uint32(n), nil, 100)
		if err != nil || !bytes.Equal(got, pattern(n, 5)) {
			t.Fatalf("long reply %d: %d bytes, %v", n, len(got), err)
		}
	}
	m, sm := cm.Metrics(), ts.srv.Metrics()
	t.Logf("client %+v", m)
	// Calls whose Sends the responder's credits did not cover at once
	// went in Call chunks (PositionZeroChunks).
	if m.Continued <= uint64(len(sizes)) || sm.Continued == 0 || m.BadReplies != 0 || m.CreditsInUse != 0 || m.Registrations != 0 {
		t.Fatalf("client %+v\nserver %+v", m, sm)
	}
	// Without continuation, the same call goes in a Call chunk.
	c1, cm1 := newClient(t, ts, ClientOptions{Credits: 16, NoContinuation: true})
	arg := pattern(20000, 1)
	if got, _, err := call(ctx, c1, pEcho, arg, false, 0, nil, 20064); err != nil || !bytes.Equal(got, arg) {
		t.Fatal(err)
	}
	if m := cm1.Metrics(); m.PositionZeroChunks != 1 || m.Continued != 0 {
		t.Fatalf("NoContinuation: %+v", m)
	}
}

// TestVersion2ContinuationErrors: a continuation broken by another
// message, or whose parts do not add up, is answered with
// RDMA2_ERR_INVAL_CONT (the draft's sections 6.3.6 and 7.1.4), and a
// good continued call on the same connection works.
func TestVersion2ContinuationErrors(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 8})
	var pbuf [20]byte
	rp, _ := dialV2(t, ts.srv.Addr().String(), connProp(1, DefaultProperties().AppendProps(nil, &pbuf)))
	null := w(0, 0, 2, tProg, tVers, 0, 0, 0, 0, 0)
	nullCall := func(xid uint32) []uint32 { n := append([]uint32(nil), null...); n[0] = xid; return n }
	send := func(msg []byte) {
		copy(rp.sb.Bytes(), msg)
		if err := rp.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{rp.sb.SGE(0, len(msg))}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // the raw peer reuses its one send buffer
	}
	// A first call is needed for more than one receive (see grants_responder.go).
	if h := decode2(t, rp.exchange(t, words(cat(w(0x50, 2, 3, 10, 0, 0, 0, 0), nullCall(0x50))...))); h.HType != HTypeReplyInline {
		t.Fatalf("%+v", h)
	}
	// MIDDLE of call 0x60 (first 5 words), then a message of call 0x61.
	send(words(cat(w(0x60, 2, 3, 9, 20), nullCall(0x60)[:5])...))
	got := rp.exchange(t, words(cat(w(0x61, 2, 3, 10, 0, 0, 0, 0), nullCall(0x61))...))
	if h := decode2(t, got); h.HType != HTypeError || h.Err.Code != Err2InvalCont || h.XID != 0x61 {
		t.Fatalf("interrupted continuation answered %+v", h)
	}
	// MIDDLE says 20 bytes remain; the final part has 8.
	send(words(cat(w(0x62, 2, 3, 9, 20), nullCall(0x62)[:5])...))
	got = rp.exchange(t, words(cat(w(0x62, 2, 3, 10, 0, 0, 0, 0), nullCall(0x62)[5:7])...))
	if h := decode2(t, got); h.HType != HTypeError || h.Err.Code != Err2InvalCont || h.XID != 0x62 {
		t.Fatalf("short final part answered %+v", h)
	}
	// Two MIDDLEs whose rdma_remaining do not follow: 20 bytes remain
	// after the first, the second carries 8 and says 4 remain.
	send(words(cat(w(0x64, 2, 3, 9, 20), nullCall(0x64)[:5])...))
	got = rp.exchange(t, words(cat(w(0x64, 2, 3, 9, 4), nullCall(0x64)[5:7])...))
	if h := decode2(t, got); h.HType != HTypeError || h.Err.Code != Err2InvalCont || h.XID != 0x64 {
		t.Fatalf("inconsistent rdma_remaining answered %+v", h)
	}
	// A good one: 5 words, then 5.
	send(words(cat(w(0x63, 2, 3, 9, 20), nullCall(0x63)[:5])...))
	got = rp.exchange(t, words(cat(w(0x63, 2, 3, 10, 0, 0, 0, 0), nullCall(0x63)[5:])...))
	if h := decode2(t, got); h.HType != HTypeReplyInline || h.XID != 0x63 {
		t.Fatalf("continued NULL answered %+v", h)
	}
	if m := ts.srv.Metrics(); m.Continued != 1 || m.Errors2[Err2InvalCont] != 3 {
		t.Fatalf("server %+v", m)
	}
}

// TestVersion2Grant: a raised grant reaches a version 2 requester at once
// in an RDMA2_GRANT (the draft's section 4.2.1.1), while its calls are in
// process: with a grant of 1 and four slow calls, raising the grant to 4
// lets the three waiting calls go before the first is answered (in
// version 1 they would wait for that reply to carry the grant).
func TestVersion2Grant(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 8, Grant: 1})
	c, cm := newClient(t, ts, ClientOptions{Credits: 8})
	ctx := tctx(t, 20*time.Second)
	if err := c.Null(ctx, tProg, tVers); err != nil { // the first call: the connection's grant applies
		t.Fatal(err)
	}
	ts.delay.Store(int64(400 * time.Millisecond))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.Call(ctx, sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pCount, MaxReplySize: 256})
		}()
	}
	time.Sleep(100 * time.Millisecond)
	if n := ts.inflight.Load(); n != 1 {
		t.Fatalf("%d calls in process with a grant of 1", n)
	}
	ts.srv.SetGrant(4)
	deadline := time.Now().Add(250 * time.Millisecond) // before the first call is answered
	for ts.inflight.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := ts.inflight.Load(); n != 4 {
		t.Fatalf("%d calls in process after the grant rose to 4, before any reply", n)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if m, sm := cm.Metrics(), ts.srv.Metrics(); m.Grants == 0 || sm.Grants == 0 || m.CreditsGranted != 4 {
		t.Fatalf("client %+v\nserver %+v", m, sm)
	}
}

// TestVersion2ConnPropMiddle: properties split over RDMA2_CONNPROP_MIDDLE
// and RDMA2_CONNPROP_FINAL accumulate (the draft's section 6.3.3): only
// the FINAL is answered, and the requester's receive buffer size from the
// MIDDLE sets the responder's send threshold; an unknown property is
// skipped.
func TestVersion2ConnPropMiddle(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 4, Inline: 16384})
	rp := &rawV2{dialRaw(t, ts.srv.Addr().String()), t}
	mid := Header{XID: 1, Vers: 2, Credits: 3, Header2: Header2{HType: HTypeConnPropMiddle,
		Props: []Prop{{Which: PropRecvSize, Data: words(16384)}, {Which: 77, Data: []byte("future")}}}}
	b, err := mid.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	copy(rp.sb.Bytes(), b)
	if err := rp.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{rp.sb.SGE(0, len(b))}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	got := rp.exchange(t, connProp(2, []Prop{{Which: PropSendSize, Data: words(16384)}}))
	if h := decode2(t, got); h.HType != HTypeConnPropFinal || h.XID != 2 {
		t.Fatalf("answer %+v", h)
	}
	if in := ts.srv.Connections()[0]; in.Version != 2 {
		t.Fatalf("%+v", in)
	}
	ts.srv.mu.Lock()
	defer ts.srv.mu.Unlock()
	for sc := range ts.srv.conns {
		if n := sc.inline.Load(); n != 16384 {
			t.Fatalf("responder's send threshold %d, want the MIDDLE's receive buffer size 16384", n)
		}
	}
}
