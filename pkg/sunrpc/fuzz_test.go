package sunrpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"testing"

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
