package sunrpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

func FuzzDecodeCallHeader(f *testing.F) {
	sys, _ := (&AuthSysParams{Stamp: 1, MachineName: "host", UID: 1000, GID: 100, GIDs: []uint32{1, 2}}).Credential()
	f.Add(encodeCall(CallHeader{XID: 1, RPCVers: 2, Prog: 100003, Vers: 3, Proc: 1}))
	f.Add(encodeCall(CallHeader{XID: 2, RPCVers: 2, Prog: 100003, Vers: 3, Proc: 6, Cred: sys}, 1, 2, 3))
	f.Add(encodeCall(CallHeader{XID: 3, RPCVers: 3}))
	f.Add(encodeCall(CallHeader{XID: 4, RPCVers: 2, Cred: OpaqueAuth{Flavor: 6, Body: make([]byte, 400)}}))
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		d := xdr.NewDecoder(in)
		h, err := DecodeCallHeader(d)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrRPCMismatch) && !errors.Is(err, ErrAuth) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		if len(h.Cred.Body) > MaxAuthBytes || len(h.Verf.Body) > MaxAuthBytes {
			t.Fatal("auth body over 400 bytes accepted")
		}
		e := xdr.NewEncoder(nil)
		h.Encode(e)
		// Equal up to the pad bytes of the auth bodies, which are not checked.
		if len(e.Bytes()) != d.Offset() {
			t.Fatalf("re-encoded %d bytes, decoded %d", len(e.Bytes()), d.Offset())
		}
	})
}

func FuzzDecodeReplyHeader(f *testing.F) {
	for _, h := range []ReplyHeader{
		{XID: 1, Stat: MsgAccepted, Accept: Success},
		{XID: 2, Stat: MsgAccepted, Accept: ProgMismatch, Low: 2, High: 3},
		{XID: 3, Stat: MsgAccepted, Accept: SystemErr, Verf: OpaqueAuth{Flavor: AuthShort, Body: []byte{1, 2, 3, 4}}},
		{XID: 4, Stat: MsgDenied, Reject: RejectRPCMismatch, Low: 2, High: 2},
		{XID: 5, Stat: MsgDenied, Reject: RejectAuthError, Auth: AuthTooWeak},
	} {
		e := xdr.NewEncoder(nil)
		h.Encode(e)
		f.Add(e.Bytes())
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		d := xdr.NewDecoder(in)
		h, err := DecodeReplyHeader(d)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		_ = h.Err()
		e := xdr.NewEncoder(nil)
		h.Encode(e)
		if len(e.Bytes()) != d.Offset() {
			t.Fatalf("re-encoded %d bytes, decoded %d", len(e.Bytes()), d.Offset())
		}
		var h2 ReplyHeader
		if h2, err = DecodeReplyHeader(xdr.NewDecoder(e.Bytes())); err != nil || h2.XID != h.XID || h2.Accept != h.Accept || h2.Auth != h.Auth {
			t.Fatalf("re-decode: %+v, %v", h2, err)
		}
	})
}

func FuzzDecodeAuthSys(f *testing.F) {
	for _, p := range []AuthSysParams{{}, {Stamp: 9, MachineName: "node", UID: 1, GID: 2, GIDs: []uint32{3, 4, 5}}} {
		c, _ := p.Credential()
		f.Add(c.Body)
	}
	f.Add([]byte{0, 0, 0, 0, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		var p AuthSysParams
		if err := DecodeAuthSys(body, &p); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		c, err := p.Credential()
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Body) != len(body) {
			t.Fatalf("re-encoded %d bytes from %d", len(c.Body), len(body))
		}
	})
}

func FuzzRecordReader(f *testing.F) {
	rec := []byte("0123456789abcdefghij")
	f.Add(fragments(rec), 64)
	f.Add(fragments(rec, 1, 0, 3, 5), 64)
	f.Add(append(fragments(rec, 7), fragments(nil)...), 20)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, 1<<20)
	f.Add([]byte{0x80, 0, 0}, 8)
	f.Fuzz(func(t *testing.T, stream []byte, max int) {
		if max < 0 || max > 1<<20 {
			return
		}
		rr := recordReader{r: bytes.NewReader(stream), max: max}
		var buf []byte
		total := 0
		for {
			got, err := rr.readRecord(buf)
			if err != nil {
				if cap(got) > max {
					t.Fatalf("buffer of %d bytes for limit %d", cap(got), max)
				}
				return
			}
			if len(got) > max {
				t.Fatalf("record of %d bytes past limit %d", len(got), max)
			}
			total += len(got) + 4
			if total > len(stream) {
				t.Fatalf("read %d record bytes from %d stream bytes", total, len(stream))
			}
			buf = got
		}
	})
}

// FuzzServerDispatch feeds arbitrary call messages to a Server: it must
// never panic, and a reply, when there is one, must be a well-formed reply
// to the call's XID.
func FuzzServerDispatch(f *testing.F) {
	sys, _ := (&AuthSysParams{MachineName: "m", UID: 5}).Credential()
	f.Add(encodeCall(CallHeader{XID: 1, RPCVers: 2, Prog: testProg, Vers: 3, Proc: procEcho}, 3, 0x61626300))
	f.Add(encodeCall(CallHeader{XID: 2, RPCVers: 2, Prog: testProg, Vers: 3, Proc: procWhoAmI, Cred: sys}))
	f.Add(encodeCall(CallHeader{XID: 3, RPCVers: 2, Prog: testProg, Vers: 9, Proc: 0}))
	f.Add(encodeCall(CallHeader{XID: 4, RPCVers: 2, Prog: testProg, Vers: 2, Proc: procGarbage}))
	f.Add(encodeCall(CallHeader{XID: 5, RPCVers: 7}))
	srv := newTestServer()
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	var req Request
	var b Builder
	f.Fuzz(func(t *testing.T, call []byte) {
		// procBlock would wait for ctx: give it an ended one.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req.Reset(call, nil, peer, "fuzz")
		b.Reset(b.Bytes())
		if !srv.Dispatch(ctx, &req, &b) {
			return
		}
		m := b.Message()
		reply := m.AppendTo(nil)
		d := xdr.NewDecoder(reply)
		h, err := DecodeReplyHeader(d)
		if err != nil {
			t.Fatalf("server produced a malformed reply %x: %v", reply, err)
		}
		if len(call) < 4 || h.XID != uint32(call[0])<<24|uint32(call[1])<<16|uint32(call[2])<<8|uint32(call[3]) {
			t.Fatalf("reply XID %#x for call %x", h.XID, call)
		}
		b.RunAfterSend()
	})
}

// FuzzTCPReplies runs the TCP client's reader over an arbitrary stream
// with calls 1 to 4 waiting, each with a 4 KiB ReplyPayload (located with
// testLocate, or at a fuzzed offset), and checks each record it reads
// against readRecord on the same stream: a placed result plus the Body
// before it is the record without the pad; anything else is the record.
func FuzzTCPReplies(f *testing.F) {
	data := bytes.Repeat([]byte{7}, 1000)
	f.Add(fragments(placementReply(1, OpaqueAuth{}, 0, data, nil)), -1)
	f.Add(append(fragments(placementReply(2, OpaqueAuth{Flavor: AuthSys, Body: []byte{1, 2, 3, 4}}, 0, data[:5], nil)),
		fragments(placementReply(3, OpaqueAuth{}, 0, data, nil), 50)...), -1)
	f.Add(fragments(placementReply(4, OpaqueAuth{}, 1, data, nil)), 0)
	f.Add(fragments(placementReply(1, OpaqueAuth{}, 0, data, []byte{1, 2, 3, 4})), 8)
	f.Fuzz(func(t *testing.T, stream []byte, at int) {
		locate := testLocate
		if at >= 0 {
			locate = func([]byte) int { return at }
		}
		tr := &tcpTransport{pending: map[uint32]*waiter{}, br: bufio.NewReaderSize(bytes.NewReader(stream), readBufferSize)}
		tr.rr = recordReader{r: tr.br, max: 8 << 10}
		ref := recordReader{r: bytes.NewReader(stream), max: 8 << 10}
		for {
			bufs := map[uint32][]byte{}
			for xid := uint32(1); xid <= 4; xid++ {
				bufs[xid] = make([]byte, 4<<10)
				tr.pending[xid] = &waiter{call: &Call{XID: xid, ReplyPayload: bufs[xid], LocateReplyPayload: locate}}
			}
			var r Reply
			w, err := tr.readReply(&r)
			want, rerr := ref.readRecord(nil)
			if (err == nil) != (rerr == nil) {
				t.Fatalf("reader: %v; readRecord: %v", err, rerr)
			}
			if err != nil {
				return
			}
			got := r.Body
			if r.Placed >= 0 {
				if w == nil || r.Placed == 0 || r.Placed > 4<<10 {
					t.Fatalf("placed %d bytes for waiter %v", r.Placed, w)
				}
				got = append(bytes.Clone(r.Body), w.call.ReplyPayload[:r.Placed]...)
				want = want[:len(want)-xdr.Pad(r.Placed)]
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("record of %d bytes read as %d (placed %d)", len(want), len(got), r.Placed)
			}
		}
	})
}

// FuzzServerDispatchTLSOffer is FuzzServerDispatch on a call the transport
// offers TLS to (a connection's first): the Server must answer STARTTLS
// exactly to a NULL call with an empty AUTH_TLS credential and AUTH_NONE
// verifier (RFC 9289 section 4.1), and tell the transport so.
func FuzzServerDispatchTLSOffer(f *testing.F) {
	f.Add(encodeCall(CallHeader{XID: 1, RPCVers: 2, Prog: testProg, Vers: 3, Cred: OpaqueAuth{Flavor: AuthTLS}}))
	f.Add(encodeCall(CallHeader{XID: 2, RPCVers: 2, Prog: 7, Vers: 1, Cred: OpaqueAuth{Flavor: AuthTLS}}))
	f.Add(encodeCall(CallHeader{XID: 3, RPCVers: 2, Prog: testProg, Vers: 3, Proc: 1, Cred: OpaqueAuth{Flavor: AuthTLS}}))
	f.Add(encodeCall(CallHeader{XID: 4, RPCVers: 2, Prog: testProg, Vers: 3, Cred: OpaqueAuth{Flavor: AuthTLS, Body: []byte("x")}}))
	f.Add(encodeCall(CallHeader{XID: 5, RPCVers: 2, Prog: testProg, Vers: 3}))
	srv := newTestServer()
	var req Request
	var b Builder
	f.Fuzz(func(t *testing.T, call []byte) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req.Reset(call, nil, nil, "fuzz")
		req.offerTLS = true
		b.Reset(b.Bytes())
		if !srv.Dispatch(ctx, &req, &b) {
			if req.startTLS {
				t.Fatal("startTLS without a reply")
			}
			return
		}
		m := b.Message()
		reply := m.AppendTo(nil)
		b.RunAfterSend()
		h, err := DecodeReplyHeader(xdr.NewDecoder(reply))
		if err != nil {
			t.Fatalf("server produced a malformed reply %x: %v", reply, err)
		}
		starttls := checkStartTLSReply(reply, h.XID) == nil
		if starttls != req.startTLS {
			t.Fatalf("reply says STARTTLS %v, request %v", starttls, req.startTLS)
		}
		if !starttls {
			return
		}
		c, err := DecodeCallHeader(xdr.NewDecoder(call))
		if err != nil || c.Proc != 0 || c.Cred.Flavor != AuthTLS || len(c.Cred.Body) != 0 || c.Verf.Flavor != AuthNone || len(c.Verf.Body) != 0 {
			t.Fatalf("STARTTLS for call %+v (%v)", c, err)
		}
	})
}

// FuzzStartTLSReply checks the client's reading of the reply to its
// AUTH_TLS probe: no panic; TLS is started only on a well-formed accepted
// reply to the probe's XID with the STARTTLS verifier; every other answer
// is ErrTLSRefused or ErrMalformed.
func FuzzStartTLSReply(f *testing.F) {
	for _, h := range []ReplyHeader{
		{XID: 1, Stat: MsgAccepted, Accept: Success, Verf: OpaqueAuth{Body: []byte("STARTTLS")}},
		{XID: 1, Stat: MsgAccepted, Accept: ProgUnavail, Verf: OpaqueAuth{Body: []byte("STARTTLS")}},
		{XID: 1, Stat: MsgAccepted, Accept: Success},
		{XID: 1, Stat: MsgAccepted, Accept: Success, Verf: OpaqueAuth{Flavor: AuthSys, Body: []byte("STARTTLS")}},
		{XID: 1, Stat: MsgDenied, Reject: RejectAuthError, Auth: AuthBadCred},
		{XID: 2, Stat: MsgAccepted, Accept: Success, Verf: OpaqueAuth{Body: []byte("STARTTLS")}},
	} {
		e := xdr.NewEncoder(nil)
		h.Encode(e)
		f.Add(e.Bytes())
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		err := checkStartTLSReply(in, 1)
		if err != nil {
			if !errors.Is(err, ErrTLSRefused) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		h, derr := DecodeReplyHeader(xdr.NewDecoder(in))
		if derr != nil || h.XID != 1 || h.Stat != MsgAccepted || h.Verf.Flavor != AuthNone || string(h.Verf.Body) != "STARTTLS" {
			t.Fatalf("TLS started on %+v (%v)", h, derr)
		}
	})
}

// FuzzTLSServerStream feeds an arbitrary byte stream to a server
// connection that requires TLS, as a client that sends it and closes: the
// plaintext phase (probe, refusals) and the handshake must end without a
// panic or a hang, and STARTTLS must have been answered only to a probe.
func FuzzTLSServerStream(f *testing.F) {
	probe := encodeCall(CallHeader{XID: 1, RPCVers: 2, Prog: testProg, Vers: 3, Cred: OpaqueAuth{Flavor: AuthTLS}})
	plain := encodeCall(CallHeader{XID: 2, RPCVers: 2, Prog: testProg, Vers: 3, Proc: procEcho}, 0)
	f.Add(fragments(probe))
	f.Add(append(fragments(probe), 0x16, 3, 1, 0, 5, 1, 0, 0, 1, 0))
	f.Add(append(fragments(plain), fragments(probe)...))
	f.Add(fragments(encodeCall(CallHeader{XID: 3, RPCVers: 2, Prog: testProg, Vers: 3, Proc: 1, Cred: OpaqueAuth{Flavor: AuthTLS}})))
	f.Add([]byte{0x80, 0, 0, 4, 0, 0, 0, 1})
	pki := newTestPKI(f)
	opts := pki.serverOpts(XprtSecMTLS, quiet)
	sec, err := opts.serverTLS()
	if err != nil {
		f.Fatal(err)
	}
	srv := newTestServer()
	f.Fuzz(func(t *testing.T, stream []byte) {
		client, server := net.Pipe()
		var wg sync.WaitGroup
		wg.Add(2)
		var replies bytes.Buffer
		go func() { defer wg.Done(); _, _ = io.Copy(&replies, client) }()
		go func() { defer wg.Done(); _, _ = client.Write(stream); _ = client.Close() }()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = serveTCPConn(ctx, server, srv, opts, sec)
		wg.Wait()
		if ctx.Err() != nil {
			t.Fatal("server connection hung")
		}
		// Every whole reply record in plaintext before a TLS record is a
		// well-formed reply, and a STARTTLS one answers the first record,
		// a probe.
		rr := recordReader{r: bytes.NewReader(replies.Bytes()), max: peekLen}
		for i := 0; ; i++ {
			rec, err := rr.readRecord(nil)
			if err != nil {
				return
			}
			h, err := DecodeReplyHeader(xdr.NewDecoder(rec))
			if err != nil {
				return // TLS records after the switch
			}
			if checkStartTLSReply(rec, h.XID) == nil && (i != 0 || !isTLSProbe(firstRecord(stream))) {
				t.Fatalf("STARTTLS in reply %d to stream %x", i, stream)
			}
		}
	})
}

// firstRecord is the first record of stream, nil if there is none.
func firstRecord(stream []byte) []byte {
	rr := recordReader{r: bytes.NewReader(stream), max: DefaultMaxRecordSize}
	rec, _ := rr.readRecord(nil)
	return rec
}
