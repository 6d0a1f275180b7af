package siw

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// TestRemoteAccessErrors: a bad STag, bounds or access right in an RDMA
// Write or Read is refused by the target with a Terminate naming the
// error; both QPs go to error; an RDMA Read completes with WCRemAccessErr.
func TestRemoteAccessErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		read   bool
		access verbs.Access
		rkey   func(verbs.MR) uint32
		off    uint64
		n      int
		want   *TerminateError
	}{
		{"write bad STag", false, allAccess, func(m verbs.MR) uint32 { return m.RKey() + 0x100 }, 0, 8, ErrTaggedSTag},
		{"write past end", false, allAccess, func(m verbs.MR) uint32 { return m.RKey() }, 4090, 8, ErrTaggedBounds},
		{"write before base", false, allAccess, func(m verbs.MR) uint32 { return m.RKey() }, ^uint64(0), 8, ErrTaggedBounds},
		{"write no access", false, verbs.AccessRemoteRead, func(m verbs.MR) uint32 { return m.RKey() }, 0, 8, ErrAccessRights},
		{"write stale key", false, allAccess, func(m verbs.MR) uint32 { k := m.RKey(); m.Rekey(); return k }, 0, 8, ErrTaggedSTag},
		{"read bad STag", true, allAccess, func(m verbs.MR) uint32 { return 0x7fffff01 }, 0, 8, ErrInvalidSTag},
		{"read past end", true, allAccess, func(m verbs.MR) uint32 { return m.RKey() }, 4000, 100, ErrBaseBounds},
		{"read no access", true, verbs.AccessRemoteWrite, func(m verbs.MR) uint32 { return m.RKey() }, 0, 8, ErrAccessRights},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := pair(t, Config{}, Config{}, verbs.QPAttr{}, nil)
			target := regMR(t, s, 4096, tc.access)
			local := regMR(t, c, 4096, verbs.AccessLocalWrite)
			addr := target.Addr() + tc.off
			if tc.off == ^uint64(0) {
				addr = target.Addr() - 8
			}
			wr := verbs.SendWR{ID: 5, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{local.SGE(0, tc.n)}, RKey: tc.rkey(target), RemoteAddr: addr}
			if tc.read {
				wr.Opcode = verbs.WRRDMARead
			}
			if err := c.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			serr := waitDone(t, s)
			mustErrIs(t, serr, tc.want)
			mustErrIs(t, serr, verbs.ErrLocalError)
			cerr := waitDone(t, c)
			mustErrIs(t, cerr, tc.want)
			mustErrIs(t, cerr, verbs.ErrRemoteError)
			if tc.read {
				wc := waitWC(t, c.scq)
				if wc.Status != verbs.WCRemAccessErr || !errors.Is(wc.Err, tc.want) {
					t.Fatalf("read completion %+v, want remote access error", wc)
				}
			}
			if !bytes.Equal(target.Bytes(), make([]byte, 4096)) {
				t.Fatal("refused operation changed the target region")
			}
		})
	}
}

func TestNoReceivePosted(t *testing.T) {
	c, s := pair(t, Config{}, Config{}, verbs.QPAttr{}, nil)
	if err := c.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}); err != nil {
		t.Fatal(err)
	}
	mustErrIs(t, waitDone(t, s), ErrNoRecvBuffer)
	mustErrIs(t, waitDone(t, c), ErrNoRecvBuffer)
}

func TestMessageTooLong(t *testing.T) {
	var rb verbs.MR
	c, s := pair(t, Config{}, Config{}, verbs.QPAttr{}, func(s *end) {
		rb = regMR(t, s, 64, verbs.AccessLocalWrite)
		s.qp.PostRecv(&verbs.RecvWR{ID: 3, SGL: []verbs.SGE{rb.SGE(0, 10)}})
		s.qp.PostRecv(&verbs.RecvWR{ID: 4, SGL: []verbs.SGE{rb.SGE(10, 10)}})
	})
	src := regMR(t, c, 100, 0)
	c.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 100)}})
	wc := waitWC(t, s.rcq)
	if wc.ID != 3 || wc.Status != verbs.WCLocLenErr || !errors.Is(wc.Err, ErrMsgTooLong) {
		t.Fatalf("first receive %+v, want local length error", wc)
	}
	wc = waitWC(t, s.rcq)
	if wc.ID != 4 || wc.Status != verbs.WCFlushErr {
		t.Fatalf("second receive %+v, want flushed", wc)
	}
	mustErrIs(t, waitDone(t, c), ErrMsgTooLong)
	if !bytes.Equal(rb.Bytes()[10:], make([]byte, 54)) {
		t.Fatal("bytes placed beyond the receive buffer")
	}
}

// TestSendWithInvalidate: the Send invalidates the receiver's STag (which a
// later RDMA Write then cannot use); Rekey makes the region usable again
// under a new STag.
func TestSendWithInvalidate(t *testing.T) {
	var rb verbs.MR
	c, s := pair(t, Config{}, Config{}, verbs.QPAttr{}, func(s *end) {
		rb = regMR(t, s, 64, verbs.AccessLocalWrite)
		s.qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rb.SGE(0, 64)}})
	})
	target := regMR(t, s, 64, allAccess)
	old := target.RKey()
	src := regMR(t, c, 64, 0)
	copy(src.Bytes(), "hello")
	c.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRSendWithInv, SGL: []verbs.SGE{src.SGE(0, 5)}, InvalidateKey: old})
	wc := waitWC(t, s.rcq)
	wantOK(t, wc, verbs.WCRecv)
	if wc.Flags&verbs.WCWithInv == 0 || wc.InvalidatedKey != old || wc.ByteLen != 5 {
		t.Fatalf("receive %+v, want invalidate of 0x%x", wc, old)
	}
	if target.Valid() {
		t.Fatal("STag still valid after Send with Invalidate")
	}
	nk := target.Rekey()
	if nk == old || !target.Valid() {
		t.Fatalf("rekey gave 0x%x (old 0x%x)", nk, old)
	}
	c.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, 5)}, RKey: nk, RemoteAddr: target.Addr()})
	notify2 := regMR(t, s, 8, verbs.AccessLocalWrite)
	s.qp.PostRecv(&verbs.RecvWR{ID: 9, SGL: []verbs.SGE{notify2.SGE(0, 8)}})
	c.qp.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRSend})
	wantOK(t, waitWC(t, s.rcq), verbs.WCRecv)
	if string(target.Bytes()[:5]) != "hello" {
		t.Fatal("write under the new STag did not land")
	}
	c.qp.PostSend(&verbs.SendWR{ID: 5, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, 5)}, RKey: old, RemoteAddr: target.Addr()})
	mustErrIs(t, waitDone(t, s), ErrTaggedSTag)
}

func TestLocalInvalidateAndLocalErrors(t *testing.T) {
	c, s := pair(t, Config{}, Config{}, verbs.QPAttr{}, nil)
	m := regMR(t, c, 64, verbs.AccessLocalWrite)
	c.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateKey: m.LKey()})
	wantOK(t, waitWC(t, c.scq), verbs.WCLocalInv)
	if m.Valid() {
		t.Fatal("still valid")
	}
	// a Send from the invalidated region is a local protection error
	c.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{m.SGE(0, 8)}})
	wc := waitWC(t, c.scq)
	if wc.ID != 2 || wc.Status != verbs.WCLocProtErr {
		t.Fatalf("completion %+v, want local protection error", wc)
	}
	mustErrIs(t, waitDone(t, c), verbs.ErrInvalidKey)
	_ = s
	if err := c.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend}); !errors.Is(err, verbs.ErrQPState) {
		t.Fatalf("post after error: %v", err)
	}
}

func TestPostValidation(t *testing.T) {
	c, _ := pair(t, Config{}, Config{}, verbs.QPAttr{MaxSGE: 2, MaxSendWR: 2}, nil)
	m := regMR(t, c, 64, verbs.AccessLocalWrite)
	sgl := []verbs.SGE{m.SGE(0, 1), m.SGE(1, 1), m.SGE(2, 1)}
	if err := c.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGL: sgl}); !errors.Is(err, verbs.ErrInvalidWR) {
		t.Fatalf("3 SGEs: %v", err)
	}
	if err := c.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: sgl[:2]}); !errors.Is(err, verbs.ErrInvalidWR) {
		t.Fatalf("read with 2 SGEs: %v", err)
	}
	if err := c.qp.PostRecv(&verbs.RecvWR{SGL: []verbs.SGE{{Addr: m.Addr(), Length: 8, LKey: 0x999}}}); !errors.Is(err, verbs.ErrInvalidKey) {
		t.Fatalf("recv with bad lkey: %v", err)
	}
	ro := regMR(t, c, 64, 0)
	if err := c.qp.PostRecv(&verbs.RecvWR{SGL: []verbs.SGE{ro.SGE(0, 8)}}); !errors.Is(err, verbs.ErrInvalidKey) {
		t.Fatalf("recv into a region without local write: %v", err)
	}
}

func TestDisconnectFlushes(t *testing.T) {
	c, s := pair(t, Config{}, Config{}, verbs.QPAttr{}, func(s *end) {
		rb := regMR(t, s, 64, verbs.AccessLocalWrite)
		s.qp.PostRecv(&verbs.RecvWR{ID: 11, SGL: []verbs.SGE{rb.SGE(0, 64)}})
		s.qp.PostRecv(&verbs.RecvWR{ID: 12, SGL: []verbs.SGE{rb.SGE(0, 64)}})
	})
	c.qp.Close()
	mustErrIs(t, waitDone(t, s), verbs.ErrDisconnect)
	for _, id := range []uint64{11, 12} {
		wc := waitWC(t, s.rcq)
		if wc.ID != id || wc.Status != verbs.WCFlushErr {
			t.Fatalf("completion %+v, want flush of %d", wc, id)
		}
	}
}

func TestRejectAndTimeouts(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	s := NewDevice(Config{})
	ln, err := s.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		req, err := ln.Accept(ctx)
		if err == nil {
			req.Reject([]byte("go away"))
		}
	}()
	c := newEnd(t, Config{}, verbs.QPAttr{})
	_, err = c.dev.Connect(ctx, ln.Addr().String(), c.qp, verbs.ConnParam{})
	var rej *verbs.RejectError
	if !errors.As(err, &rej) || string(rej.PrivateData) != "go away" || !errors.Is(err, verbs.ErrRejected) {
		t.Fatalf("connect to a rejecting listener: %v", err)
	}

	// a listener that never answers the MPA request
	silent, _ := net.Listen("tcp", "127.0.0.1:0")
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	c2 := newEnd(t, Config{HandshakeTimeout: 300 * time.Millisecond}, verbs.QPAttr{})
	t0 := time.Now()
	_, err = c2.dev.Connect(ctx, silent.Addr().String(), c2.qp, verbs.ConnParam{})
	if !errors.Is(err, verbs.ErrTimeout) || time.Since(t0) > 5*time.Second {
		t.Fatalf("silent peer: %v after %v", err, time.Since(t0))
	}
	c3 := newEnd(t, Config{}, verbs.QPAttr{})
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err = c3.dev.Connect(cctx, silent.Addr().String(), c3.qp, verbs.ConnParam{}); err == nil {
		t.Fatal("connect with an expiring context succeeded")
	}

	// a client that connects and sends nothing: Accept is never offered it,
	// and a client that is not MPA at all is dropped.
	junk, _ := net.Dial("tcp", ln.Addr().String())
	junk.Write(bytes.Repeat([]byte("GET / HTTP/1.0\r\n"), 4))
	junk.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := junk.Read(make([]byte, 1)); err == nil {
		t.Fatal("a non-MPA client got an answer")
	}
	junk.Close()
}

// TestMalformedTraffic feeds frames a correct peer never sends and checks
// the Terminate we answer with and the error our QP reports.
func TestMalformedTraffic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		noRTR bool
		send  func(p *rawPeer, mr verbs.MR) []byte
		want  *TerminateError
	}{
		{"bad CRC", false, func(p *rawPeer, mr verbs.MR) []byte {
			b := p.untagged(opSend, true, 0, qnSend, 1, 0, []byte("abcd"))
			b[len(b)-1] ^= 0xff
			return b
		}, ErrCRC},
		{"no RTR", true, func(p *rawPeer, mr verbs.MR) []byte {
			return p.untagged(opSend, true, 0, qnSend, 1, 0, []byte("abcd"))
		}, ErrNoMatchingRTR},
		{"wrong MSN", false, func(p *rawPeer, mr verbs.MR) []byte {
			return p.untagged(opSend, true, 0, qnSend, 7, 0, []byte("abcd"))
		}, ErrMSNRange},
		{"wrong QN", false, func(p *rawPeer, mr verbs.MR) []byte {
			return p.untagged(opSend, true, 0, 5, 1, 0, []byte("abcd"))
		}, ErrInvalidQN},
		{"wrong MO", false, func(p *rawPeer, mr verbs.MR) []byte {
			return p.untagged(opSend, true, 0, qnSend, 1, 8, []byte("abcd"))
		}, ErrInvalidMO},
		{"tagged Send", false, func(p *rawPeer, mr verbs.MR) []byte {
			return p.tagged(opSend, true, mr.RKey(), mr.Addr(), []byte("abcd"))
		}, ErrUnexpectedOp},
		{"unsolicited Read Response", false, func(p *rawPeer, mr verbs.MR) []byte {
			return p.tagged(opReadResponse, true, mr.RKey(), mr.Addr(), []byte("abcd"))
		}, ErrUnexpectedOp},
		{"opcode 9", false, func(p *rawPeer, mr verbs.MR) []byte {
			return p.untagged(9, true, 0, 0, 1, 0, nil)
		}, ErrUnexpectedOp},
		{"DDP version 2", false, func(p *rawPeer, mr verbs.MR) []byte {
			var h [2 + untaggedHdrLen]byte
			putUntagged(h[:], 0, true, opSend, 0, qnSend, 1, 0)
			h[2] = h[2]&^ddpVerMask | 2
			return p.fpdu(h[2:], []byte("abcd"))
		}, ErrUntaggedVersn},
		{"RDMAP version 0", false, func(p *rawPeer, mr verbs.MR) []byte {
			var h [2 + untaggedHdrLen]byte
			putUntagged(h[:], 0, true, opSend, 0, qnSend, 1, 0)
			h[3] &^= rdmapVerMask
			return p.fpdu(h[2:], []byte("abcd"))
		}, ErrRDMAPVersion},
		{"ULPDU shorter than header", false, func(p *rawPeer, mr verbs.MR) []byte {
			return p.fpdu([]byte{0x41, 0x43, 0, 0}, nil)
		}, &TerminateError{Layer: LayerDDP, EType: ddpLocalCatastrophic}},
		{"IRD exceeded", false, func(p *rawPeer, mr verbs.MR) []byte {
			var all []byte
			for i := uint32(1); i <= 40; i++ {
				rr := readReq{sinkSTag: 0x100, sinkTO: 0, size: 4096, srcSTag: mr.RKey(), srcTO: mr.Addr()}
				var b [readReqLen]byte
				rr.put(b[:])
				all = append(all, p.untagged(opReadRequest, true, 0, qnReadReq, i, 0, b[:])...)
			}
			return all
		}, ErrMSNRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, mr, addr, accepted := rawServer(t, Config{}, 2)
			p := dialRaw(t, addr, true, !tc.noRTR, 2, 2)
			p.send(tc.send(p, mr))
			term := p.readTerminate(t)
			if term.layer != tc.want.Layer || term.etype != tc.want.EType || term.code != tc.want.Code {
				t.Fatalf("Terminate %+v, want %v", term, tc.want)
			}
			err := waitDone(t, s)
			mustErrIs(t, err, tc.want)
			mustErrIs(t, err, verbs.ErrLocalError)
			<-accepted
		})
	}
}

// TestTerminateLayouts: a Terminate control word in the siw layout (layer
// in the low nibble) and in the RFC 5040 layout decode to the same error.
func TestTerminateLayouts(t *testing.T) {
	for _, tc := range []struct {
		b                  [4]byte
		layer, etype, code uint8
	}{
		{[4]byte{0x02, 0x02, 0x00, 0}, LayerMPA, 0, mpaCRCError},         // siw: MPA CRC error
		{[4]byte{0x20, 0x02, 0xc0, 0}, LayerMPA, 0, mpaCRCError},         // RFC 5040 with M, D
		{[4]byte{0x10, 0x00, 0x06, 0}, LayerRDMAP, 1, 0},                 // siw: invalid STag, D R
		{[4]byte{0x11, 0x01, 0xc0, 0}, LayerDDP, 1, ddpTBaseBounds},      // RFC
		{[4]byte{0x21, 0x02, 0x03, 0}, LayerDDP, 2, ddpUNoBuffer},        // siw: no buffer (M D)
		{[4]byte{0x12, 0x02, 0xc0, 0}, LayerDDP, 2, ddpUNoBuffer},        // RFC
		{[4]byte{0x02, 0x06, 0x00, 0}, LayerRDMAP, 2, rdmapUnexpectedOp}, // RFC
	} {
		got := parseTermCtrl(tc.b[:])
		if got.layer != tc.layer || got.etype != tc.etype || got.code != tc.code {
			t.Errorf("% x: got %d/%d/0x%x, want %d/%d/0x%x", tc.b, got.layer, got.etype, got.code, tc.layer, tc.etype, tc.code)
		}
	}
	var b [4]byte
	putTermCtrl(b[:], termCtrl{layer: LayerMPA, code: mpaCRCError, m: true, d: true})
	if b != [4]byte{0x20, 0x02, 0xc0, 0} {
		t.Fatalf("RFC layout % x", b)
	}
}

// TestPeerStopsReading: a peer that completes the handshake and then never
// reads must not hang a writer forever: TCP_USER_TIMEOUT fails the
// connection and the outstanding requests are flushed.
func TestPeerStopsReading(t *testing.T) {
	if testing.Short() {
		t.Skip("takes a few seconds")
	}
	ctx := testenv.Context(t, 20*time.Second)
	// our active side against a raw listener that answers MPA and then sleeps
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var req mpaFrame
		if readMPAFrame(c, false, &req) != nil {
			return
		}
		rep := mpaFrame{reply: true, rev: 2, enhanced: true, crc: true, ird: 1, ord: 1}
		b, _ := rep.encode(nil)
		c.Write(b)
		<-ctx.Done() // never read again
	}()
	c := newEnd(t, Config{UserTimeout: time.Second, NoP2P: true}, verbs.QPAttr{})
	if _, err := c.dev.Connect(ctx, ln.Addr().String(), c.qp, verbs.ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		t.Fatal(err)
	}
	src := regMR(t, c, 8<<20, 0)
	t0 := time.Now()
	for i := 0; i < 16; i++ {
		c.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 8<<20)}, RKey: 0x101})
	}
	select {
	case <-c.qp.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("writer still blocked after 60 s against a peer that stopped reading")
	}
	mustErrIs(t, c.qp.Err(), verbs.ErrDisconnect)
	t.Logf("failed after %v: %v", time.Since(t0), c.qp.Err())
	flushed := 0
	for i := 0; i < 16; i++ {
		if wc := waitWC(t, c.scq); wc.Status == verbs.WCFlushErr {
			flushed++
		}
	}
	if flushed == 0 {
		t.Fatal("no request was flushed")
	}
}

// TestCloseWhileSending: closing a QP while its transmit path is in the
// middle of a large RDMA Write (or a Connect/Accept is attaching) is clean:
// every request completes exactly once, nothing races, nothing leaks.
func TestCloseWhileSending(t *testing.T) {
	for i := 0; i < 20; i++ {
		c, s := pair(t, Config{}, Config{}, verbs.QPAttr{}, nil)
		dst := regMR(t, s, 1<<20, verbs.AccessRemoteWrite)
		src := regMR(t, c, 1<<20, 0)
		for k := 0; k < 4; k++ {
			c.qp.PostSend(&verbs.SendWR{ID: uint64(k), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{src.SGE(0, 1<<20)}, RKey: dst.RKey(), RemoteAddr: dst.Addr()})
		}
		time.Sleep(time.Duration(i) * 20 * time.Microsecond)
		c.qp.Close()
		seen := map[uint64]bool{}
		for k := 0; k < 4; k++ {
			wc := waitWC(t, c.scq)
			if seen[wc.ID] || (wc.Status != verbs.WCSuccess && wc.Status != verbs.WCFlushErr) {
				t.Fatalf("completion %+v (seen %v)", wc, seen)
			}
			seen[wc.ID] = true
		}
		if n := c.scq.Poll(make([]verbs.WC, 4)); n != 0 {
			t.Fatalf("%d extra completions", n)
		}
		waitDone(t, s)
	}
}

// TestCloseWhileReceiving: closing the receiving QP while Sends and Read
// Responses are arriving: no byte is placed into a receive buffer after its
// flush completion was delivered (the race detector watches the buffers).
func TestCloseWhileReceiving(t *testing.T) {
	for i := 0; i < 20; i++ {
		var rb verbs.MR
		c, s := pair(t, Config{}, Config{}, verbs.QPAttr{}, func(s *end) {
			rb = regMR(t, s, 8*(1<<20), verbs.AccessLocalWrite)
			for k := 0; k < 8; k++ {
				s.qp.PostRecv(&verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{rb.SGE(k<<20, 1<<20)}})
			}
		})
		src := regMR(t, c, 1<<20, verbs.AccessRemoteRead)
		sink := regMR(t, s, 1<<20, verbs.AccessLocalWrite)
		for k := 0; k < 8; k++ {
			c.qp.PostSend(&verbs.SendWR{ID: uint64(k), Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 1<<20)}})
		}
		s.qp.PostSend(&verbs.SendWR{ID: 99, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{sink.SGE(0, 1<<20)}, RKey: src.RKey(), RemoteAddr: src.Addr()})
		time.Sleep(time.Duration(i) * 30 * time.Microsecond)
		s.qp.Close()
		for k := 0; k < 8; k++ {
			wc := waitWC(t, s.rcq)
			if wc.Status == verbs.WCFlushErr {
				// the consumer owns the buffer again: writing it must not race
				clear(rb.Bytes()[wc.ID<<20 : (wc.ID+1)<<20])
			}
		}
		if wc := waitWC(t, s.scq); wc.Status == verbs.WCFlushErr {
			clear(sink.Bytes())
		}
	}
}
