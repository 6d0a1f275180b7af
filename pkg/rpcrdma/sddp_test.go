package rpcrdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Tests of send-based DDP (the rtrext draft) between our requester and
// responder over software iWARP, and of its structures.

const (
	sProg   = 0x20000078
	pPlaced = 1 // DDP-eligible argument, uint32 tail -> opaque copy, tail, where it was
	pSwap   = 2 // DDP-eligible argument (pattern(len, 7)), uint32 n -> n bytes of givePattern DDP-eligible, 1 if the argument was right
)

// placedSeen records the last pPlaced argument the handler saw.
type placedSeen struct {
	n atomic.Int64 // its length
}

// startSDDPServer is startServer with the pPlaced program, which answers
// the argument's bytes (an opaque), the tail and whether the argument
// was page-aligned and in a receive buffer of the connection.
func startSDDPServer(t testing.TB, opts ServerOptions) (*testSrv, *placedSeen) {
	ts := startServer(t, opts)
	seen := &placedSeen{}
	ts.rpc.Register(sProg, 1, []sunrpc.Handler{
		pPlaced: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			d := req.ArgsDecoder()
			b := req.Payload(d, 4<<20)
			tail := d.Uint32()
			if d.Err() != nil {
				return d.Err()
			}
			var inRecv, aligned uint32
			if len(b) > 0 {
				p := uintptr(unsafe.Pointer(&b[0]))
				seen.n.Store(int64(len(b)))
				if p%PageSize == 0 {
					aligned = 1
				}
				for _, c := range ts.srvConns() {
					r := c.recvMR.Bytes()
					lo := uintptr(unsafe.Pointer(&r[0]))
					if p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(r)) {
						inRecv = 1
					}
				}
			}
			res.Opaque(b)
			res.Uint32(tail)
			res.Uint32(aligned)
			res.Uint32(inRecv)
			return nil
		},
		pSwap: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			d := req.ArgsDecoder()
			b := req.Payload(d, 4<<20)
			n := d.Uint32()
			if d.Err() != nil || n > 4<<20 {
				return sunrpc.ErrGarbageArgs
			}
			res.Payload(givePattern[:n])
			if bytes.Equal(b, pattern(len(b), 7)) {
				res.Uint32(1)
			} else {
				res.Uint32(0)
			}
			return nil
		},
	})
	return ts, seen
}

// placedCall sends arg as pPlaced's DDP-eligible argument and checks the
// echo: it returns whether the responder saw it page-aligned in its
// receive buffer.
// swapCall makes a pSwap call with arg as its DDP-eligible argument and
// res as the result's buffer: placed is the result's bytes placed in res
// (sunrpc.Call.Placed), argOK 1 when the handler got arg intact.
func swapCall(ctx context.Context, c *sunrpc.Client, arg, res []byte) (placed int, argOK uint32, err error) {
	err = c.Call(ctx, sunrpc.CallSpec{Prog: sProg, Vers: 1, Proc: pSwap,
		Args: func(b *sunrpc.Builder) { b.Payload(arg); b.Uint32(uint32(len(res))) },
		Results: func(d *xdr.Decoder, pl int) error {
			placed = pl
			d.Uint32()
			argOK = d.Uint32()
			return d.Err()
		}, ReplyPayload: res, MaxReplySize: 512})
	return placed, argOK, err
}

func placedCall(ctx context.Context, t *testing.T, c *sunrpc.Client, arg []byte) (aligned, inRecv bool, err error) {
	t.Helper()
	var got []byte
	var tail, al, in uint32
	err = c.Call(ctx, sunrpc.CallSpec{Prog: sProg, Vers: 1, Proc: pPlaced,
		Args: func(b *sunrpc.Builder) { b.Payload(arg); b.Uint32(0x5dd9) },
		Results: func(d *xdr.Decoder, _ int) error {
			got = append([]byte(nil), d.Opaque(8<<20)...)
			tail, al, in = d.Uint32(), d.Uint32(), d.Uint32()
			return d.Err()
		}, MaxReplySize: len(arg) + 1024})
	if err != nil {
		return false, false, err
	}
	if !bytes.Equal(got, arg) || tail != 0x5dd9 {
		t.Fatalf("%d bytes: %d bytes back (equal %v), tail %#x", len(arg), len(got), bytes.Equal(got, arg), tail)
	}
	return al == 1, in == 1, nil
}

// TestSendDDPCalls: with SendDDP on both peers, a call's DDP-eligible
// argument that fits one receive lands page-aligned in the responder's
// receive buffer (RDMA2_CALL_SDDP, counted on both sides, no Read chunk)
// and reaches the handler from there, intact; larger ones take the Read
// chunk as before; responder-provided Read chunks work beside it; an
// argument and a DDP-eligible result of the same call too.
func TestSendDDPCalls(t *testing.T) {
	const in = 64 << 10
	ts, _ := startSDDPServer(t, ServerOptions{Credits: 8, Inline: in, SendDDP: true})
	c, cm := newClient(t, ts, ClientOptions{Credits: 8, Inline: in, SendDDP: true, SendDDPGroups: true})
	ctx := tctx(t, 30*time.Second)
	for _, k := range []struct {
		n          int
		sddp, read bool
	}{{4096, true, false}, {5001, true, false}, {16<<10 + 3, true, false}, {in - PageSize, true, false},
		{in - PageSize + 1, false, false}, // larger than the window, fits inline: inline
		{100 << 10, false, false},         // a transmission group of 2 Sends (sddpgroup_test.go)
		{300 << 10, false, true}} {
		arg := pattern(k.n, k.n)
		before, sb := cm.Metrics(), ts.srv.Metrics()
		aligned, inRecv, err := placedCall(ctx, t, c, arg)
		if err != nil {
			t.Fatalf("%d bytes: %v", k.n, err)
		}
		m, sm := cm.Metrics(), ts.srv.Metrics()
		sent, got := m.SendDDPMsgs-before.SendDDPMsgs, sm.SendDDPMsgs-sb.SendDDPMsgs
		reads := m.ReadChunks - before.ReadChunks
		if k.sddp {
			if sent != 1 || got != 1 || reads != 0 || !aligned || !inRecv ||
				m.SendDDPBytes-before.SendDDPBytes != uint64(k.n) || sm.SendDDPBytes-sb.SendDDPBytes != uint64(k.n) {
				t.Fatalf("%d bytes: send-based DDP sent %d received %d, Read chunks %d, aligned %v, in the receive buffer %v", k.n, sent, got, reads, aligned, inRecv)
			}
			// the Send: the 1 KiB header segment, then the item and its
			// pad, nothing more (no page of zeros before the item)
			if b := m.InlineBytes - before.InlineBytes; b != uint64(rbHeaderLen+(k.n+3)&^3) {
				t.Fatalf("%d bytes: a Send of %d bytes, want %d", k.n, b, rbHeaderLen+(k.n+3)&^3)
			}
		} else if !k.read && k.n > in {
			if sent != 1 || got != 1 || reads != 0 || m.SendDDPGroups-before.SendDDPGroups != 1 {
				t.Fatalf("%d bytes: send-based DDP sent %d received %d, Read chunks %d, groups %d", k.n, sent, got, reads, m.SendDDPGroups-before.SendDDPGroups)
			}
		} else if sent != 0 || got != 0 || (reads == 1) != k.read || inRecv == k.read {
			t.Fatalf("%d bytes: send-based DDP sent %d received %d, Read chunks %d (want %v), in the receive buffer %v", k.n, sent, got, reads, k.read, inRecv)
		}
	}
	// Beside responder-provided Read chunks and Write chunks.
	before := cm.Metrics()
	if got, err := longCall(ctx, c, 200000, 300000, true); err != nil || !bytes.Equal(got, pattern(200000, 5)) {
		t.Fatalf("reply in a Read chunk: %d bytes, %v", len(got), err)
	}
	if m := cm.Metrics(); m.ReplyReadChunks != before.ReplyReadChunks+1 {
		t.Fatalf("ReplyReadChunks %d -> %d", before.ReplyReadChunks, m.ReplyReadChunks)
	}
	arg, res := pattern(20000, 7), make([]byte, 200000)
	before = cm.Metrics()
	placed, argOK, err := swapCall(ctx, c, arg, res)
	if err != nil || placed != len(res) || argOK != 1 || !bytes.Equal(res, givePattern[:len(res)]) {
		t.Fatalf("DDP both ways: placed %d, argument right %d, %v", placed, argOK, err)
	}
	// The result (4 of the requester's windows) as a transmission group.
	if m := cm.Metrics(); m.SendDDPMsgs != before.SendDDPMsgs+2 || m.SendDDPGroups != before.SendDDPGroups+1 || m.WriteChunks != before.WriteChunks || m.ReadChunks != before.ReadChunks {
		t.Fatalf("DDP echo: send-based DDP %d (groups %d), Write chunks %d, Read chunks %d", m.SendDDPMsgs-before.SendDDPMsgs, m.SendDDPGroups-before.SendDDPGroups, m.WriteChunks-before.WriteChunks, m.ReadChunks-before.ReadChunks)
	}
}

// TestSendDDPOff: with SendDDP off on either side, or a structure the
// requester cannot use (no DDP-targetable segment: Inline 4096; a window
// smaller than the argument), calls go as before: inline or in a Read
// chunk, nothing by send-based DDP.
func TestSendDDPOff(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cli, srv bool
		inline   int
	}{{"requester-off", false, true, 64 << 10}, {"responder-off", true, false, 64 << 10}, {"no-ddp-segment", true, true, 4096}, {"one-page-window", true, true, 8192}} {
		t.Run(tc.name, func(t *testing.T) {
			ts, _ := startSDDPServer(t, ServerOptions{Credits: 8, Inline: tc.inline, SendDDP: tc.srv})
			c, cm := newClient(t, ts, ClientOptions{Credits: 8, Inline: tc.inline, SendDDP: tc.cli})
			ctx := tctx(t, 30*time.Second)
			for _, n := range []int{5000, 100 << 10} {
				before := cm.Metrics()
				_, inRecv, err := placedCall(ctx, t, c, pattern(n, 1))
				if err != nil {
					t.Fatal(err)
				}
				m, sm := cm.Metrics(), ts.srv.Metrics()
				if m.SendDDPMsgs != 0 || sm.SendDDPMsgs != 0 {
					t.Fatalf("%d bytes: send-based DDP used (%d, %d)", n, m.SendDDPMsgs, sm.SendDDPMsgs)
				}
				inline := m.InlineMsgs - before.InlineMsgs
				reads := m.ReadChunks - before.ReadChunks
				if (reads == 1) != (n > tc.inline) || inRecv == (n > tc.inline) || inline != 1 {
					t.Fatalf("%d bytes: Read chunks %d, inline messages %d, argument in the receive buffer %v", n, reads, inline, inRecv)
				}
			}
		})
	}
}

// TestSendDDPTransmitErrors: placements that do not match the
// responder's structure are answered RDMA2_XMTERR with the rtrext
// draft's code and range (section 9.5), the call fails with it, nothing
// is handed to the handler, and the connection goes on; RDMA2_CALL_SDDP
// to a responder that did not announce a structure is
// RDMA2_ERR_INVAL_HTYPE.
func TestSendDDPTransmitErrors(t *testing.T) {
	const in = 64 << 10
	ts, seen := startSDDPServer(t, ServerOptions{Credits: 8, Inline: in, SendDDP: true})
	ctx := tctx(t, 30*time.Second)
	cm := &ClientMetrics{}
	tr, c := dialOne(ctx, t, ts, ClientOptions{Credits: 8, Inline: in, SendDDP: true, Metrics: cm})
	segs := in/PageSize - 1
	for _, k := range badPlacements(in, segs) {
		tr.mangleSDDP = k.mangle
		seen.n.Store(0)
		before := ts.srv.Metrics().XmitErrors
		_, _, err := placedCall(ctx, t, c, pattern(5000, 4))
		var xe *XmitErr
		if !errors.As(err, &xe) || !errors.Is(err, ErrChunk) {
			t.Fatalf("%s: %v, want a Transmit Error", k.name, err)
		}
		if xe.Code != k.code || k.value != 0 && (xe.Value != k.value || xe.Min != k.min || xe.Max != k.max) || xe.Bad.Dir != 0 || xe.Bad.Seq != 0 {
			t.Fatalf("%s: %+v, want %v value %d in [%d, %d]", k.name, xe, k.code, k.value, k.min, k.max)
		}
		if seen.n.Load() != 0 || ts.srv.Metrics().XmitErrors != before+1 {
			t.Fatalf("%s: handler saw %d bytes, responder XmitErrors %d", k.name, seen.n.Load(), ts.srv.Metrics().XmitErrors-before)
		}
	}
	if cm.Metrics().XmitErrors != 8 {
		t.Fatalf("requester XmitErrors %d", cm.Metrics().XmitErrors)
	}
	tr.mangleSDDP = nil
	if _, _, err := placedCall(ctx, t, c, pattern(5000, 4)); err != nil {
		t.Fatalf("after the Transmit Errors: %v", err)
	}

	// A responder that announced nothing.
	ts2, _ := startSDDPServer(t, ServerOptions{Credits: 8, Inline: in})
	tr2, err := Dial(ctx, newDev(), ts2.srv.Addr().String(), ClientOptions{Credits: 8, Inline: in, SendDDP: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.Close()
	if tr2.sddp {
		t.Fatal("send-based DDP on without the responder's structure")
	}
	rb, _ := ourRBStruct(in)
	tr2.sddpWin, _ = rb.window()
	tr2.sddpLimit, tr2.sddp = in, true
	c2, err := sunrpc.NewClient(func(context.Context) (sunrpc.ClientTransport, error) { return tr2, nil }, sunrpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, _, err = placedCall(ctx, t, c2, pattern(5000, 4))
	var er *ErrorReply
	if !errors.As(err, &er) || er.Code2 != Err2InvalHType {
		t.Fatalf("RDMA2_CALL_SDDP to a responder without the extension: %v", err)
	}
}

// TestRecvBufStruct: the property's XDR round-trips, bad values are
// RDMA2_ERR_BAD_PROPVAL, and the window a sender finds: the first run of
// DDP-targetable segments, none without one.
func TestRecvBufStruct(t *testing.T) {
	rb, ok := ourRBStruct(64 << 10)
	if !ok {
		t.Fatal("no structure for 64 KiB")
	}
	got, err := DecodeRecvBufStruct(rb.Append(nil))
	if err != nil || got.Length != rb.Length || len(got.Groups) != 3 || got.Groups[0] != rb.Groups[0] || got.Groups[1] != rb.Groups[1] || got.Groups[2] != rb.Groups[2] {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if w, ok := got.window(); !ok || w != (ddpWindow{Start: rbHeaderLen, Size: 15 * PageSize, SegLen: PageSize, Segs: 15}) {
		t.Fatalf("window %+v %v", w, ok)
	}
	for _, n := range []int{4096, 6144, 1024} {
		if _, ok := ourRBStruct(n); ok {
			t.Fatalf("a structure for %d bytes", n)
		}
	}
	// the layout: with the structure announced each receive's DDP pages
	// start on a page boundary (the receive pool is page-aligned);
	// without it, or without a structure, receives are packed
	if l := newRecvLayout(16<<10, true); l.stride%PageSize != 0 || (l.off+rbHeaderLen)%PageSize != 0 || l.size != 16<<10 || l.off+l.size > l.stride {
		t.Fatalf("newRecvLayout(16 KiB, sddp) = %+v", l)
	}
	for _, k := range []struct {
		in   int
		sddp bool
	}{{16 << 10, false}, {4096, true}, {6144, true}} {
		if l := newRecvLayout(k.in, k.sddp); l != (recvLayout{stride: k.in, size: k.in}) {
			t.Fatalf("newRecvLayout(%d, %v) = %+v, want packed", k.in, k.sddp, l)
		}
	}
	noDDP := RecvBufStruct{Length: 8192, Groups: []RBGroup{{Count: 2, Seg: RBSeg{Length: 4096}}}}
	if _, ok := noDDP.window(); ok {
		t.Fatal("a window without a DDP-targetable segment")
	}
	for name, v := range map[string][]byte{
		"short":      words(8192),
		"length":     words(8000, 1, 2, 4096, 0, 1),
		"zero-count": words(0, 1, 0, 4096, 0, 1),
		"odd-length": words(6, 1, 1, 6, 0, 0),
		"align":      words(4096, 1, 1, 4096, 3, 0),
		"groups":     words(0, 17),
		"trailing":   append(rb.Append(nil), 0, 0, 0, 0),
		"huge":       words(0, 2, 0xffffffff, 4096, 0, 0, 0xffffffff, 4096, 0, 0),
	} {
		if _, err := DecodeRecvBufStruct(v); !errors.Is(err, ErrPropVal) {
			t.Fatalf("%s: %v, want ErrPropVal", name, err)
		}
	}
	// plan: the header and stream must stay before the window, the
	// item within it and the message within the limit.
	w, _ := rb.window()
	if _, _, ok := w.plan(100, 4000, 8192, 64<<10, nil); ok {
		t.Fatal("planned a stream reaching the window")
	}
	if _, _, ok := w.plan(100, 100, 15*PageSize+1, 64<<10, nil); ok {
		t.Fatal("planned an item larger than the window")
	}
	if _, _, ok := w.plan(100, 100, 8192, 8192, nil); ok {
		t.Fatal("planned a message over the limit")
	}
	if s, n, ok := w.plan(100, 100, 8193, 64<<10, nil); !ok || n != rbHeaderLen+8196 || len(s.TBSN) != 3 || s.TBSN[2] != 2 {
		t.Fatalf("plan %+v %d %v", s, n, ok)
	}
}

// BenchmarkSendDDPWrite: WRITE-like calls (a DDP-eligible argument of 4
// KiB to 1 MiB, a 4-byte result, taken by the handler as the pieces the
// transport placed, as the NFS server's WRITE does), one outstanding, on
// version 2: "send-ddp" as our peers run by default (SDDPInline
// buffers: the argument in the Send, page-aligned in the responder's
// receive buffer, up to 12 KiB; larger ones take the Read chunk),
// "send-ddp-groups" (the same with SendDDPGroups: up to 16 Sends of 12
// KiB, 192 KiB, as a transmission group), "send-ddp-64k" (64 KiB
// buffers, 60 KiB per Send, larger as a group), "read-chunk" as
// with nosddp (4 KiB buffers: the argument in a Read chunk the responder
// pulls by RDMA Read), "inline-16k" (SDDPInline buffers without
// send-based DDP: the argument inline, unaligned, up to the buffer).
func BenchmarkSendDDPWrite(b *testing.B) {
	for _, mode := range []struct {
		name   string
		inline int
		sddp   bool
		groups bool
	}{{"send-ddp", SDDPInline, true, false}, {"send-ddp-groups", SDDPInline, true, true}, {"send-ddp-64k", 64 << 10, true, true},
		{"read-chunk", 0, false, false}, {"inline-16k", SDDPInline, false, false}} {
		ts := startServer(b, ServerOptions{Credits: 32, Inline: mode.inline, SendDDP: mode.sddp})
		c, cm := newClient(b, ts, ClientOptions{Credits: 32, Inline: mode.inline, SendDDP: mode.sddp, SendDDPGroups: mode.groups, Versions: &VersionCache{}})
		warmUp(b, c, 200)
		for _, n := range []int{4 << 10, 12 << 10, 32 << 10, 64 << 10, 128 << 10, 1 << 20} {
			arg := pattern(n, 1)
			spec := sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pSink,
				Args:         func(e *sunrpc.Builder) { e.Payload(arg) },
				Results:      func(d *xdr.Decoder, placed int) error { d.Uint32(); return d.Err() },
				MaxReplySize: 256}
			b.Run(fmt.Sprintf("%s/%dKiB", mode.name, n>>10), func(b *testing.B) {
				benchCalls(b, c, cm, spec, n,
					perOp{"sddp/op", func(m *Metrics) uint64 { return m.SendDDPMsgs }},
					perOp{"groups/op", func(m *Metrics) uint64 { return m.SendDDPGroups }},
					perOp{"readchunks/op", func(m *Metrics) uint64 { return m.ReadChunks }})
			})
		}
		if m := cm.Metrics(); m.RegisteredBytes > 0 {
			b.Logf("%s: %d bytes registered by the requester", mode.name, m.RegisteredBytes)
		}
	}
}

// TestSendDDPReplies: a DDP-eligible result that fits the requester's
// receive goes as RDMA2_REPLY_SDDP into the requester's DDP-targetable
// pages and reaches the caller intact, in Call.ReplyPayload (Placed) or,
// without one, back in the reply's body; larger results take the Write
// chunk as before; with SendDDP off on either side, nothing changes.
func TestSendDDPReplies(t *testing.T) {
	const in = 64 << 10
	for _, tc := range []struct {
		name     string
		cli, srv bool
	}{{"both", true, true}, {"requester-off", false, true}, {"responder-off", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ts, _ := startSDDPServer(t, ServerOptions{Credits: 8, Inline: in, SendDDP: tc.srv})
			c, cm := newClient(t, ts, ClientOptions{Credits: 8, Inline: in, SendDDP: tc.cli})
			ctx := tctx(t, 30*time.Second)
			on := tc.cli && tc.srv
			for _, k := range []struct {
				n          int
				sddp, buf  bool
				writeChunk bool
			}{{4096, true, true, false}, {5001, true, true, false}, {in - PageSize, true, true, false}, {5001, true, false, false},
				{100, false, true, false}, {1 << 20, false, true, true}} { // 1 MiB: past a transmission group (sddpgroup_test.go)
				var res []byte
				if k.buf {
					res = make([]byte, k.n)
				}
				before, sb := cm.Metrics(), ts.srv.Metrics()
				got, placed, err := call(ctx, c, pGive, nil, false, uint32(k.n), res, 512)
				if err != nil || !bytes.Equal(got, givePattern[:k.n]) {
					t.Fatalf("%+v: %d bytes, equal %v, %v", k, len(got), bytes.Equal(got, givePattern[:k.n]), err)
				}
				m, sm := cm.Metrics(), ts.srv.Metrics()
				want := uint64(0)
				if on && k.sddp {
					want = 1
				}
				if m.SendDDPMsgs-before.SendDDPMsgs != want || sm.SendDDPMsgs-sb.SendDDPMsgs != want ||
					(m.WriteChunks-before.WriteChunks == 1) != k.writeChunk || (k.buf && (want == 1 || k.writeChunk)) != (placed == k.n) {
					t.Fatalf("%+v: send-based DDP %d/%d (want %d), Write chunks %d, placed %d", k, m.SendDDPMsgs-before.SendDDPMsgs, sm.SendDDPMsgs-sb.SendDDPMsgs, want, m.WriteChunks-before.WriteChunks, placed)
				}
				if want == 1 && m.SendDDPBytes-before.SendDDPBytes != uint64(k.n) {
					t.Fatalf("%+v: SendDDPBytes %d", k, m.SendDDPBytes-before.SendDDPBytes)
				}
			}
		})
	}
}

// TestSendDDPReplyPlacementErrors: an RDMA2_REPLY_SDDP whose placement
// does not match the requester's structure fails its call with the
// rtrext draft's Transmit Error (section 9.5) about the reply (xmsi_dir
// 1): each code and range, counted as a bad reply; nothing is written
// into the caller's Call.ReplyPayload (no stray write), nothing panics,
// and the connection goes on.
func TestSendDDPReplyPlacementErrors(t *testing.T) {
	const in = 64 << 10
	const n = 5001
	ts, _ := startSDDPServer(t, ServerOptions{Credits: 8, Inline: in, SendDDP: true})
	c, cm := newClient(t, ts, ClientOptions{Credits: 8, Inline: in, SendDDP: true})
	ctx := tctx(t, 30*time.Second)
	segs := in/PageSize - 1
	for _, k := range append(badPlacements(in, segs),
		badPlacement{"disp-past-stream", func(s *SDDP) { s.Disp = s.PSLen + 4 }, XmitErrBadPL, 0, 0, 0}) {
		for _, withBuf := range []bool{true, false} {
			mangle := k.mangle
			ts.srv.mangleReplySDDP.Store(&mangle)
			var res []byte
			if withBuf {
				res = bytes.Repeat([]byte{0xee}, n)
			}
			before := cm.Metrics()
			_, _, err := call(ctx, c, pGive, nil, false, n, res, 512)
			var xe *XmitErr
			if !errors.As(err, &xe) || !errors.Is(err, ErrChunk) {
				t.Fatalf("%s: %v, want a Transmit Error", k.name, err)
			}
			if xe.Code != k.code || k.value != 0 && (xe.Value != k.value || xe.Min != k.min || xe.Max != k.max) || xe.Bad.Dir != 1 || xe.Bad.Seq != 0 {
				t.Fatalf("%s: %+v, want %v value %d in [%d, %d] about a reply", k.name, xe, k.code, k.value, k.min, k.max)
			}
			if withBuf && !bytes.Equal(res, bytes.Repeat([]byte{0xee}, n)) {
				t.Fatalf("%s: the caller's reply buffer was written", k.name)
			}
			if m := cm.Metrics(); m.BadReplies != before.BadReplies+1 || m.SendDDPMsgs != before.SendDDPMsgs {
				t.Fatalf("%s: bad replies %d, send-based DDP messages %d", k.name, m.BadReplies-before.BadReplies, m.SendDDPMsgs-before.SendDDPMsgs)
			}
		}
	}
	ts.srv.mangleReplySDDP.Store(nil)
	res := make([]byte, n)
	got, placed, err := call(ctx, c, pGive, nil, false, n, res, 512)
	if err != nil || placed != n || !bytes.Equal(got, givePattern[:n]) {
		t.Fatalf("after the errors: placed %d, %v", placed, err)
	}
	if m := cm.Metrics(); m.CreditsInUse != 0 {
		t.Fatalf("credits in use %d", m.CreditsInUse)
	}
}

// TestSendDDPTransmitErrorReception: every Transmit Error code of the
// rtrext draft's section 9.5, with and without optxe_lead, reaches the
// requester intact: the call fails with the *XmitErr (matching
// ErrChunk) carrying the responder's code, transmission ids and
// arguments, counted in XmitErrors, and the connection goes on.
func TestSendDDPTransmitErrorReception(t *testing.T) {
	const in = 64 << 10
	ts, _ := startSDDPServer(t, ServerOptions{Credits: 8, Inline: in, SendDDP: true})
	ctx := tctx(t, 30*time.Second)
	cm := &ClientMetrics{}
	tr, c := dialOne(ctx, t, ts, ClientOptions{Credits: 8, Inline: in, SendDDP: true, Metrics: cm})
	// A placement the responder refuses, so that it answers RDMA2_XMTERR;
	// the body it sends is the one forced below.
	tr.mangleSDDP = func(s *SDDP) { s.TBSN[0] = 1000 }
	lead := XmsID{XID: 0x51, Dir: 0, Seq: 1}
	var sent []XmitErr
	for code := XmitErrBadHMT; code <= XmitErrBadPL; code++ {
		for _, withLead := range []bool{false, true} {
			xe := XmitErr{Bad: XmsID{XID: 0x50 + uint32(code), Dir: 1, Seq: 2}, HasLead: withLead, Code: code}
			if withLead {
				xe.Lead = lead
			}
			switch xe.armLen() {
			case 8:
				xe.Expect, xe.Current = 3, 7
			case 12:
				xe.Value, xe.Min, xe.Max = 9, 4, 8
			}
			sent = append(sent, xe)
		}
	}
	for i, want := range sent {
		ts.srv.forceXmitErr.Store(&want)
		before := cm.Metrics().XmitErrors
		_, _, err := placedCall(ctx, t, c, pattern(5000, 4))
		var got *XmitErr
		if !errors.As(err, &got) || !errors.Is(err, ErrChunk) {
			t.Fatalf("%v: %v, want a Transmit Error", want.Code, err)
		}
		if *got != want {
			t.Fatalf("case %d: got %+v, want %+v", i, *got, want)
		}
		if cm.Metrics().XmitErrors != before+1 {
			t.Fatalf("%v: XmitErrors %d", want.Code, cm.Metrics().XmitErrors-before)
		}
	}
	ts.srv.forceXmitErr.Store(nil)
	tr.mangleSDDP = nil
	if _, _, err := placedCall(ctx, t, c, pattern(5000, 4)); err != nil {
		t.Fatalf("after the errors: %v", err)
	}
}

// badPlacement is an SDDP header mangled by mangle, which its receiver
// answers with Transmit Error code, value and the range [min, max] it
// allows (draft-dnoveck-rpcrdma-rtrext section 8).
type badPlacement struct {
	name     string
	mangle   func(*SDDP)
	code     XmitErrCode
	value    uint32
	min, max uint32
}

// badPlacements are the placements a receiver of in-byte buffers with
// segs DDP-targetable pages refuses, in calls and in replies alike.
func badPlacements(in, segs int) []badPlacement {
	return []badPlacement{
		{"tbsn-past-window", func(s *SDDP) { s.TBSN[0] = uint32(segs) }, XmitErrBadTBSN, uint32(segs), 0, uint32(segs - 1)},
		{"tbsn-not-consecutive", func(s *SDDP) { s.TBSN[1] = 5 }, XmitErrBadTBSN, 5, 1, 1},
		{"offset-past-segment", func(s *SDDP) { s.Offset = PageSize }, XmitErrBadOff, PageSize, 0, PageSize - 1},
		{"offset-unaligned", func(s *SDDP) { s.Offset = 2 }, XmitErrBadOff, 2, 0, PageSize - 1},
		{"segment-overrun", func(s *SDDP) { s.Length = 3 * PageSize }, XmitErrBadOff, 3 * PageSize, 0, 2 * PageSize},
		{"past-received", func(s *SDDP) { s.TBSN[0], s.TBSN[1] = 10, 11 }, XmitErrBadOff, 0, 0, 0},
		{"pslen-past-message", func(s *SDDP) { s.PSLen = uint32(in) }, XmitErrBadPL, 0, 0, 0},
		{"disp-unaligned", func(s *SDDP) { s.Disp = 3 }, XmitErrBadPL, 0, 0, 0},
	}
}
