package rpcrdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Tests of send-based DDP across several Sends (sddpgroup.go).

const pVec = 3 // DDP-eligible argument -> opaque copy, pieces, whether every piece lies in a receive buffer

// startGroupServer is startSDDPServer with pVec, which takes the
// argument as the pieces the transport placed (Request.PayloadVec).
func startGroupServer(t testing.TB, opts ServerOptions) *testSrv {
	ts, _ := startSDDPServer(t, opts)
	ts.rpc.Register(sProg, 2, []sunrpc.Handler{
		pVec: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			d := req.ArgsDecoder()
			vec := req.PayloadVec(d, 4<<20)
			if d.Err() != nil {
				return d.Err()
			}
			var all []byte
			inRecv := uint32(1)
			for _, p := range vec {
				all = append(all, p...)
				if len(p) == 0 {
					continue
				}
				in := false
				for _, c := range ts.srvConns() {
					r := c.recvMR.Bytes()
					lo, q := uintptr(unsafe.Pointer(&r[0])), uintptr(unsafe.Pointer(&p[0]))
					in = in || q >= lo && q+uintptr(len(p)) <= lo+uintptr(len(r))
				}
				if !in {
					inRecv = 0
				}
			}
			res.Opaque(all)
			res.Uint32(uint32(len(vec)))
			res.Uint32(inRecv)
			return nil
		},
	})
	return ts
}

// vecCall sends arg as pVec's argument, checks the echo and returns the
// pieces the handler got and whether they were all in receive buffers.
func vecCall(ctx context.Context, t *testing.T, c *sunrpc.Client, arg []byte) (pieces int, inRecv bool, err error) {
	t.Helper()
	var got []byte
	var n, in uint32
	err = c.Call(ctx, sunrpc.CallSpec{Prog: sProg, Vers: 2, Proc: pVec,
		Args: func(b *sunrpc.Builder) { b.Payload(arg) },
		Results: func(d *xdr.Decoder, _ int) error {
			got = append([]byte(nil), d.Opaque(8<<20)...)
			n, in = d.Uint32(), d.Uint32()
			return d.Err()
		}, MaxReplySize: len(arg) + 1024})
	if err != nil {
		return 0, false, err
	}
	if !bytes.Equal(got, arg) {
		t.Fatalf("%d bytes: %d bytes back, equal %v", len(arg), len(got), bytes.Equal(got, arg))
	}
	return int(n), in == 1, nil
}

// TestSendDDPGroupCalls: with SendDDP at SDDPInline on both peers, an
// argument larger than one Send's window (12 KiB) and within
// MaxContinuation Sends goes as a transmission group: no Read chunk,
// one piece per Send that carries some of it, every piece in the
// responder's receive buffers (not copied), counted on both sides;
// larger ones take the Read chunk; the held receives come back (many
// calls in a row on few credits); beside responder-provided Read chunks
// and a Write chunk in the same call.
func TestSendDDPGroupCalls(t *testing.T) {
	ts := startGroupServer(t, ServerOptions{Credits: 32, Inline: SDDPInline, SendDDP: true})
	c, cm := newClient(t, ts, ClientOptions{Credits: 32, Inline: SDDPInline, SendDDP: true, SendDDPGroups: true})
	ctx := tctx(t, 60*time.Second)
	win := SDDPInline - PageSize
	// The first call goes under the initial credit of 1: a call the
	// responder granted nothing more to yet takes the Read chunk.
	if _, _, err := vecCall(ctx, t, c, pattern(100, 1)); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		n     int
		group bool
	}{{16 << 10, true}, {32 << 10, true}, {64 << 10, true}, {100001, true}, {128 << 10, true}, {16 * win, true}, {16*win + 1, false}, {300 << 10, false}} {
		arg := pattern(k.n, k.n)
		before, sb := cm.Metrics(), ts.srv.Metrics()
		pieces, inRecv, err := vecCall(ctx, t, c, arg)
		if err != nil {
			t.Fatalf("%d bytes: %v", k.n, err)
		}
		m, sm := cm.Metrics(), ts.srv.Metrics()
		groups, sgroups := m.SendDDPGroups-before.SendDDPGroups, sm.SendDDPGroups-sb.SendDDPGroups
		reads := m.ReadChunks - before.ReadChunks
		sends := (xdr.RoundUp(k.n) + win - 1) / win
		if k.group {
			if groups != 1 || sgroups != 1 || reads != 0 || !inRecv || pieces != sends ||
				m.SendDDPBytes-before.SendDDPBytes != uint64(k.n) || sm.SendDDPBytes-sb.SendDDPBytes != uint64(k.n) {
				t.Fatalf("%d bytes: groups %d/%d, Read chunks %d, %d pieces (want %d), in receive buffers %v", k.n, groups, sgroups, reads, pieces, sends, inRecv)
			}
		} else if groups != 0 || sgroups != 0 || reads != 1 || pieces != 1 {
			t.Fatalf("%d bytes: groups %d/%d, Read chunks %d, %d pieces", k.n, groups, sgroups, reads, pieces)
		}
	}
	// The receives held by each group come back: more calls than the
	// responder has receives.
	arg := pattern(64<<10, 3)
	for i := range 40 {
		if _, _, err := vecCall(ctx, t, c, arg); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// Beside responder-provided Read chunks and a Write chunk.
	before := cm.Metrics()
	if got, err := longCall(ctx, c, 200000, 300000, true); err != nil || !bytes.Equal(got, pattern(200000, 5)) {
		t.Fatalf("reply in a Read chunk: %d bytes, %v", len(got), err)
	}
	arg, res := pattern(50000, 7), make([]byte, 200000)
	placed, argOK, err := swapCall(ctx, c, arg, res)
	if err != nil || placed != len(res) || argOK != 1 || !bytes.Equal(res, givePattern[:len(res)]) {
		t.Fatalf("group and Write chunk: placed %d, argument right %d, %v", placed, argOK, err)
	}
	if m := cm.Metrics(); m.ReplyReadChunks != before.ReplyReadChunks+1 || m.SendDDPGroups != before.SendDDPGroups+1 || m.WriteChunks != before.WriteChunks+1 || m.ReadChunks != before.ReadChunks {
		t.Fatalf("beside the others: reply Read chunks %d, groups %d, Write chunks %d, Read chunks %d", m.ReplyReadChunks-before.ReplyReadChunks,
			m.SendDDPGroups-before.SendDDPGroups, m.WriteChunks-before.WriteChunks, m.ReadChunks-before.ReadChunks)
	}
	if m := cm.Metrics(); m.CreditsInUse != 0 {
		t.Fatalf("credits in use %d", m.CreditsInUse)
	}
}

// TestSendDDPGroupFallback: a group the responder's credits do not cover
// now (its grant is smaller than the Sends), or with SendDDP off on
// either side, NoContinuation or SendDDPGroups off (the default), goes
// in a Read chunk as before.
func TestSendDDPGroupFallback(t *testing.T) {
	for _, tc := range []struct {
		name       string
		srvCredits int
		cli, srv   bool
		noCont     bool
		noGroups   bool
	}{{"few-credits", 4, true, true, false, false}, {"requester-off", 32, false, true, false, false}, {"responder-off", 32, true, false, false, false},
		{"nocontinuation", 32, true, true, true, false}, {"groups-off", 32, true, true, false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startGroupServer(t, ServerOptions{Credits: tc.srvCredits, Inline: SDDPInline, SendDDP: tc.srv})
			c, cm := newClient(t, ts, ClientOptions{Credits: 32, Inline: SDDPInline, SendDDP: tc.cli, SendDDPGroups: !tc.noGroups, NoContinuation: tc.noCont})
			ctx := tctx(t, 30*time.Second)
			if _, _, err := vecCall(ctx, t, c, pattern(100, 1)); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				before := cm.Metrics()
				if _, _, err := vecCall(ctx, t, c, pattern(64<<10, 2)); err != nil {
					t.Fatal(err)
				}
				m, sm := cm.Metrics(), ts.srv.Metrics()
				if m.SendDDPGroups != 0 || sm.SendDDPGroups != 0 || m.ReadChunks != before.ReadChunks+1 {
					t.Fatalf("groups %d/%d, Read chunks %d", m.SendDDPGroups, sm.SendDDPGroups, m.ReadChunks-before.ReadChunks)
				}
			}
		})
	}
}

// TestSendDDPGroupTransmitErrors: groups whose numbering or placement do
// not match are answered RDMA2_XMTERR about the Send where it fails
// (the rtrext draft's section 9.5): a segment number past the group, a
// Send number that does not follow (renumbered, or a Send missing), an
// item overrunning the bytes received; nothing reaches the handler, the
// held receives come back and the connection goes on.
func TestSendDDPGroupTransmitErrors(t *testing.T) {
	ts := startGroupServer(t, ServerOptions{Credits: 32, Inline: SDDPInline, SendDDP: true})
	ctx := tctx(t, 60*time.Second)
	cm := &ClientMetrics{}
	tr, c := dialOne(ctx, t, ts, ClientOptions{Credits: 32, Inline: SDDPInline, SendDDP: true, SendDDPGroups: true, Metrics: cm})
	if _, _, err := vecCall(ctx, t, c, pattern(100, 1)); err != nil {
		t.Fatal(err)
	}
	const n = 64<<10 + 100 // 6 Sends, the last with 100 bytes and its pad
	sends := uint32(6)
	for _, k := range []struct {
		name  string
		setup func()
		code  XmitErrCode
		seq   uint32
		check func(xe *XmitErr) bool
	}{
		{"tbsn-past-group", func() { tr.mangleSDDP = func(s *SDDP) { s.TBSN[0] = 1000 } }, XmitErrBadTBSN, sends - 1,
			func(xe *XmitErr) bool { return xe.Value == 1000 && xe.Max == 3*sends-1 }},
		{"tbsn-not-consecutive", func() { tr.mangleSDDP = func(s *SDDP) { s.TBSN[7] = 3 } }, XmitErrBadTBSN, sends - 1,
			func(xe *XmitErr) bool { return xe.Value == 3 && xe.Min == 7 && xe.Max == 7 }},
		{"renumbered", func() { tr.mangleXNum = func(int) uint32 { return 0 } }, XmitErrBadSeq, 0,
			func(xe *XmitErr) bool {
				return xe.Expect == 1 && xe.Current == 0 && xe.HasLead && xe.Lead.XID == xe.Bad.XID
			}},
		{"send-missing", func() { tr.dropPart = 2 }, XmitErrBadSeq, 2,
			func(xe *XmitErr) bool { return xe.Expect == 1 && xe.Current == 2 && xe.HasLead }},
		{"item-overrun", func() { tr.mangleSDDP = func(s *SDDP) { s.Length += 8 } }, XmitErrBadOff, sends - 1,
			func(xe *XmitErr) bool { return xe.Max == uint32(rbHeaderLen+n-5*(SDDPInline-PageSize)) }},
		{"offset-past-segment", func() { tr.mangleSDDP = func(s *SDDP) { s.Offset = PageSize } }, XmitErrBadOff, sends - 1,
			func(xe *XmitErr) bool { return xe.Value == PageSize }},
	} {
		k.setup()
		before := ts.srv.Metrics()
		_, _, err := vecCall(ctx, t, c, pattern(n, 4))
		tr.mangleSDDP, tr.mangleXNum, tr.dropPart = nil, nil, 0
		var xe *XmitErr
		if !errors.As(err, &xe) || !errors.Is(err, ErrChunk) {
			t.Fatalf("%s: %v, want a Transmit Error", k.name, err)
		}
		if xe.Code != k.code || xe.Bad.Seq != k.seq || xe.Bad.Dir != 0 || !k.check(xe) {
			t.Fatalf("%s: %+v, want %v about Send %d", k.name, xe, k.code, k.seq)
		}
		if sm := ts.srv.Metrics(); sm.XmitErrors == before.XmitErrors || sm.SendDDPGroups != before.SendDDPGroups {
			t.Fatalf("%s: responder XmitErrors %d, groups handed up %d", k.name, sm.XmitErrors-before.XmitErrors, sm.SendDDPGroups-before.SendDDPGroups)
		}
	}
	for i := range 40 {
		if _, _, err := vecCall(ctx, t, c, pattern(n, 5)); err != nil {
			t.Fatalf("after the errors, call %d: %v", i, err)
		}
	}
}

// TestSendDDPGroupReplies: with SendDDP at SDDPInline on both peers, a
// DDP-eligible result larger than the requester's window goes as a
// transmission group into its DDP-targetable pages when the call
// offered no Write chunk (the requester reserved receives for it):
// copied once into Call.ReplyPayload (Placed) or, without one, into the
// reply's body; past MaxContinuation Sends, or without responder-provided
// Read chunks (no fallback for a reply the responder could not send
// so), or with SendDDP off on either side, the Write chunk as before.
// The held receives come back: many calls in a row.
func TestSendDDPGroupReplies(t *testing.T) {
	win := SDDPInline - PageSize
	for _, tc := range []struct {
		name     string
		cli, srv bool
		noRPRC   bool
	}{{"both", true, true, false}, {"no-rprc", true, true, true}, {"requester-off", false, true, false}, {"responder-off", true, false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startGroupServer(t, ServerOptions{Credits: 32, Inline: SDDPInline, SendDDP: tc.srv})
			c, cm := newClient(t, ts, ClientOptions{Credits: 32, Inline: SDDPInline, SendDDP: tc.cli, SendDDPGroups: true, NoResponderReadChunks: tc.noRPRC})
			ctx := tctx(t, 60*time.Second)
			if _, _, err := call(ctx, c, pGive, nil, false, 100, nil, 512); err != nil {
				t.Fatal(err)
			}
			on := tc.cli && tc.srv && !tc.noRPRC
			for _, k := range []struct {
				n     int
				buf   bool
				group bool
			}{{16 << 10, true, true}, {64<<10 + 100, true, true}, {128 << 10, true, true}, {16 * win, true, true}, {16*win + 4, true, false}, {40000, false, true}} {
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
				groups, sgroups := m.SendDDPGroups-before.SendDDPGroups, sm.SendDDPGroups-sb.SendDDPGroups
				writes := m.WriteChunks - before.WriteChunks
				want := uint64(0)
				if on && k.group || tc.cli && tc.srv && !k.buf {
					// Without Call.ReplyPayload no Write chunk is
					// offered: the responder sends the group whenever
					// our credits cover it.
					want = 1
				}
				if groups != want || sgroups != want || k.buf && (writes == 1) == (want == 1) || k.buf && placed != k.n {
					t.Fatalf("%+v: groups %d/%d (want %d), Write chunks %d, placed %d", k, groups, sgroups, want, writes, placed)
				}
				if want == 1 && m.SendDDPBytes-before.SendDDPBytes != uint64(k.n) {
					t.Fatalf("%+v: SendDDPBytes %d", k, m.SendDDPBytes-before.SendDDPBytes)
				}
			}
			res := make([]byte, 64<<10)
			before := cm.Metrics()
			for i := range 40 {
				if got, _, err := call(ctx, c, pGive, nil, false, uint32(len(res)), res, 512); err != nil || !bytes.Equal(got, givePattern[:len(res)]) {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			// Each a group still: the receives held came back.
			if groups := cm.Metrics().SendDDPGroups - before.SendDDPGroups; on && groups != 40 {
				t.Fatalf("40 calls in a row: %d groups", groups)
			}
			if m := cm.Metrics(); m.CreditsInUse != 0 {
				t.Fatalf("credits in use %d", m.CreditsInUse)
			}
		})
	}
}

// TestSendDDPGroupReplyErrors: a reply group whose numbering or
// placement does not match the requester's structure fails its call
// with the Transmit Error about the Send where it fails (xmsi_dir 1),
// counted as a bad reply; nothing is written into Call.ReplyPayload, and
// the connection and its receives go on.
func TestSendDDPGroupReplyErrors(t *testing.T) {
	ts := startGroupServer(t, ServerOptions{Credits: 32, Inline: SDDPInline, SendDDP: true})
	c, cm := newClient(t, ts, ClientOptions{Credits: 32, Inline: SDDPInline, SendDDP: true, SendDDPGroups: true})
	ctx := tctx(t, 60*time.Second)
	if _, _, err := call(ctx, c, pGive, nil, false, 100, nil, 512); err != nil {
		t.Fatal(err)
	}
	const n = 64<<10 + 100
	sends := uint32(6)
	for _, k := range []struct {
		name   string
		mangle func(*SDDP)
		xnum   func(int) uint32
		code   XmitErrCode
		seq    uint32
	}{
		{"tbsn-past-group", func(s *SDDP) { s.TBSN[0] = 1000 }, nil, XmitErrBadTBSN, sends - 1},
		{"item-overrun", func(s *SDDP) { s.Length += 8 }, nil, XmitErrBadOff, sends - 1},
		{"renumbered", nil, func(i int) uint32 { return uint32(i) &^ 2 }, XmitErrBadSeq, 0},
	} {
		if k.mangle != nil {
			ts.srv.mangleReplySDDP.Store(&k.mangle)
		}
		if k.xnum != nil {
			ts.srv.replyXNum.Store(&k.xnum)
		}
		res := bytes.Repeat([]byte{0xee}, n)
		before := cm.Metrics()
		_, _, err := call(ctx, c, pGive, nil, false, n, res, 512)
		ts.srv.mangleReplySDDP.Store(nil)
		ts.srv.replyXNum.Store(nil)
		var xe *XmitErr
		if !errors.As(err, &xe) || !errors.Is(err, ErrChunk) {
			t.Fatalf("%s: %v, want a Transmit Error", k.name, err)
		}
		if xe.Code != k.code || xe.Bad.Dir != 1 || k.code != XmitErrBadSeq && xe.Bad.Seq != k.seq {
			t.Fatalf("%s: %+v, want %v about Send %d", k.name, xe, k.code, k.seq)
		}
		if !bytes.Equal(res, bytes.Repeat([]byte{0xee}, n)) {
			t.Fatalf("%s: the caller's reply buffer was written", k.name)
		}
		if m := cm.Metrics(); m.BadReplies != before.BadReplies+1 || m.SendDDPGroups != before.SendDDPGroups {
			t.Fatalf("%s: bad replies %d, groups %d", k.name, m.BadReplies-before.BadReplies, m.SendDDPGroups-before.SendDDPGroups)
		}
	}
	res := make([]byte, n)
	for i := range 40 {
		if got, placed, err := call(ctx, c, pGive, nil, false, n, res, 512); err != nil || placed != n || !bytes.Equal(got, givePattern[:n]) {
			t.Fatalf("after the errors, call %d: placed %d, %v", i, placed, err)
		}
	}
	if m := cm.Metrics(); m.CreditsInUse != 0 {
		t.Fatalf("credits in use %d", m.CreditsInUse)
	}
}

// BenchmarkSendDDPRead: READ-like calls (a DDP-eligible result of 4 KiB
// to 1 MiB into Call.ReplyPayload), one outstanding, on version 2:
// "send-ddp" as our peers run by default (SDDPInline buffers: the result
// in one Send up to 12 KiB, copied once from the receive into
// ReplyPayload; larger ones in the Write chunk), "send-ddp-groups" (the
// same with SendDDPGroups: up to 192 KiB as a transmission group, copied
// once from the receives), "send-ddp-64k" (64 KiB buffers, 60 KiB per
// Send), "write-chunk" as with nosddp (4 KiB buffers: the result RDMA
// Written into ReplyPayload).
func BenchmarkSendDDPRead(b *testing.B) {
	for _, mode := range []struct {
		name   string
		inline int
		sddp   bool
		groups bool
	}{{"send-ddp", SDDPInline, true, false}, {"send-ddp-groups", SDDPInline, true, true}, {"send-ddp-64k", 64 << 10, true, false}, {"write-chunk", 0, false, false}} {
		ts := startServer(b, ServerOptions{Credits: 32, Inline: mode.inline, SendDDP: mode.sddp})
		c, cm := newClient(b, ts, ClientOptions{Credits: 32, Inline: mode.inline, SendDDP: mode.sddp, SendDDPGroups: mode.groups, Versions: &VersionCache{}})
		warmUp(b, c, 200)
		for _, n := range []int{4 << 10, 12 << 10, 32 << 10, 64 << 10, 128 << 10, 1 << 20} {
			res := make([]byte, n)
			spec := sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pGive,
				Args:         func(e *sunrpc.Builder) { e.Uint32(uint32(n)) },
				Results:      func(d *xdr.Decoder, placed int) error { return d.Err() },
				ReplyPayload: res, MaxReplySize: 512}
			b.Run(fmt.Sprintf("%s/%dKiB", mode.name, n>>10), func(b *testing.B) {
				benchCalls(b, c, cm, spec, n,
					perOp{"sddp/op", func(m *Metrics) uint64 { return m.SendDDPMsgs }},
					perOp{"groups/op", func(m *Metrics) uint64 { return m.SendDDPGroups }},
					perOp{"writechunks/op", func(m *Metrics) uint64 { return m.WriteChunks }})
			})
		}
	}
}

// TestSendDDPGroupReplyCredits: results that would go as groups of 11
// Sends, for calls that reserved nothing (no Call.ReplyPayload), many at
// once on a requester of 4 credits (20 receives): the responder sends a
// group only while the requester's credits cover it, the others in
// responder-provided Read chunks; every call gets its result intact and
// the connection stays up.
func TestSendDDPGroupReplyCredits(t *testing.T) {
	ts := startGroupServer(t, ServerOptions{Credits: 32, Inline: SDDPInline, SendDDP: true})
	c, cm := newClient(t, ts, ClientOptions{Credits: 4, Inline: SDDPInline, SendDDP: true, SendDDPGroups: true})
	ctx := tctx(t, 60*time.Second)
	if _, _, err := call(ctx, c, pGive, nil, false, 100, nil, 512); err != nil {
		t.Fatal(err)
	}
	const n = 128 << 10
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			for range 5 {
				got, _, err := call(ctx, c, pGive, nil, false, n, nil, 512)
				if err == nil && !bytes.Equal(got, givePattern[:n]) {
					err = errors.New("result not intact")
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	m := cm.Metrics()
	if m.SendDDPGroups == 0 || m.ReplyReadChunks == 0 || m.SendDDPGroups+m.ReplyReadChunks < 40 {
		t.Fatalf("groups %d, reply Read chunks %d", m.SendDDPGroups, m.ReplyReadChunks)
	}
}

// TestSendDDPGroupNoAllocs: in the steady state a call whose argument,
// or whose result, goes as a transmission group allocates nothing on
// either side (the handler takes the argument's pieces).
func TestSendDDPGroupNoAllocs(t *testing.T) {
	const credits = 8
	ts := startServer(t, ServerOptions{Credits: 32, Inline: SDDPInline, SendDDP: true})
	c, cm := newClient(t, ts, ClientOptions{Credits: credits, Inline: SDDPInline, SendDDP: true, SendDDPGroups: true})
	ctx := context.Background()
	const n = 64 << 10
	arg, res := pattern(n, 9), make([]byte, n)
	for _, sh := range []struct {
		name string
		spec sunrpc.CallSpec
	}{
		{"argument", sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pSink,
			Args:         func(b *sunrpc.Builder) { b.Payload(arg) },
			Results:      func(d *xdr.Decoder, placed int) error { d.Uint32(); return d.Err() },
			MaxReplySize: 256}},
		{"result", sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pGive,
			Args:         func(e *sunrpc.Builder) { e.Uint32(n) },
			Results:      func(d *xdr.Decoder, placed int) error { return d.Err() },
			ReplyPayload: res, MaxReplySize: 512}},
	} {
		t.Run(sh.name, func(t *testing.T) {
			for range 8 * credits {
				if err := c.Call(ctx, sh.spec); err != nil {
					t.Fatal(err)
				}
			}
			before := cm.Metrics()
			var err error
			allocs := testing.AllocsPerRun(40, func() {
				if e := c.Call(ctx, sh.spec); e != nil && err == nil {
					err = e
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if m := cm.Metrics(); m.SendDDPGroups-before.SendDDPGroups != 41 || m.Registrations != 0 {
				t.Fatalf("%d groups in 41 calls, %d registrations", m.SendDDPGroups-before.SendDDPGroups, m.Registrations)
			}
			if raceEnabled {
				t.Logf("%.1f allocations per call (race detector on: not checked)", allocs)
			} else if allocs != 0 {
				t.Errorf("%.1f allocations per call in the steady state, want 0", allocs)
			}
		})
	}
}

// TestSendDDPKeepPlaced: with Call.KeepPlaced (sunrpc.CallSpec.TakePlaced)
// a result received by send-based DDP, in one Send or a group, is handed
// on as the pieces of the receive buffers where it landed: intact,
// Call.ReplyPayload not written, counted as kept; the receives come back
// when the taker releases them (more calls than credits). A result in a
// Write chunk is in ReplyPayload as before, nothing to take.
func TestSendDDPKeepPlaced(t *testing.T) {
	ts := startGroupServer(t, ServerOptions{Credits: 32, Inline: SDDPInline, SendDDP: true})
	ctx := tctx(t, 60*time.Second)
	cm := &ClientMetrics{}
	tr, c := dialOne(ctx, t, ts, ClientOptions{Credits: 8, Inline: SDDPInline, SendDDP: true, SendDDPGroups: true, Metrics: cm})
	if _, _, err := call(ctx, c, pGive, nil, false, 100, nil, 512); err != nil {
		t.Fatal(err)
	}
	recv := tr.recvMR.Bytes()
	for _, k := range []struct {
		n      int
		pieces int // 0: not handed on
	}{{5001, 1}, {SDDPInline - PageSize, 1}, {64<<10 + 100, 6}, {300 << 10, 0}} {
		for i := range 20 {
			res := bytes.Repeat([]byte{0xee}, k.n)
			var vec [][]byte
			var release func()
			before := cm.Metrics()
			err := c.Call(ctx, sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pGive,
				Args:         func(e *sunrpc.Builder) { e.Uint32(uint32(k.n)) },
				Results:      func(d *xdr.Decoder, placed int) error { return d.Err() },
				ReplyPayload: res, MaxReplySize: 512,
				TakePlaced: func(v [][]byte, rel func()) { vec, release = v, rel }})
			if err != nil {
				t.Fatalf("%d bytes: %v", k.n, err)
			}
			kept := cm.Metrics().SendDDPKept - before.SendDDPKept
			if k.pieces == 0 {
				if vec != nil || kept != 0 || !bytes.Equal(res, givePattern[:k.n]) {
					t.Fatalf("%d bytes: handed on %d pieces (kept %d), in ReplyPayload %v", k.n, len(vec), kept, bytes.Equal(res, givePattern[:k.n]))
				}
				continue
			}
			if len(vec) != k.pieces || kept != 1 || !bytes.Equal(res, bytes.Repeat([]byte{0xee}, k.n)) {
				t.Fatalf("%d bytes: %d pieces (want %d), kept %d, ReplyPayload written %v", k.n, len(vec), k.pieces, kept, !bytes.Equal(res, bytes.Repeat([]byte{0xee}, k.n)))
			}
			if got := bytes.Join(vec, nil); !bytes.Equal(got, givePattern[:k.n]) {
				t.Fatalf("%d bytes, call %d: the pieces hold %d bytes, equal %v", k.n, i, len(got), bytes.Equal(got, givePattern[:k.n]))
			}
			for _, p := range vec {
				lo, q := uintptr(unsafe.Pointer(&recv[0])), uintptr(unsafe.Pointer(&p[0]))
				if q < lo || q+uintptr(len(p)) > lo+uintptr(len(recv)) {
					t.Fatalf("%d bytes: a piece outside the requester's receive buffers", k.n)
				}
			}
			// Held until released: the call's credit and receive.
			if m := cm.Metrics(); m.CreditsInUse != 1 {
				t.Fatalf("%d bytes: %d credits in use while the pieces are held", k.n, m.CreditsInUse)
			}
			release()
		}
	}
	if m := cm.Metrics(); m.CreditsInUse != 0 {
		t.Fatalf("credits in use %d", m.CreditsInUse)
	}
}
