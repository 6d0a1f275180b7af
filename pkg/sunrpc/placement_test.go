package sunrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// testLocate is the locator of the placement tests' results: a status
// word, then (status 0) the DDP-eligible item, as NFS READLINK3res without
// attributes.
func testLocate(results []byte) int {
	if len(results) < 8 || binary.BigEndian.Uint32(results) != 0 {
		return -1
	}
	return 4
}

// placementReply is a reply to xid: verifier verf, results status, then
// an opaque of data (with its pad), then more (bytes a last item would
// not have).
func placementReply(xid uint32, verf OpaqueAuth, status uint32, data, more []byte) []byte {
	e := xdr.NewEncoder(nil)
	rh := acceptedReply(xid, Success)
	rh.Verf = verf
	rh.Encode(e)
	e.Uint32(status)
	e.Opaque(data)
	e.Fixed(more)
	return e.Bytes()
}

// replyServer answers each call it reads with the record reply(xid) makes
// (already record-marked).
func replyServer(t *testing.T, reply func(xid uint32) []byte) string {
	return rawServer(t, func(conn net.Conn) {
		rr := recordReader{r: bufio.NewReader(conn), max: DefaultMaxRecordSize}
		for {
			rec, err := rr.readRecord(nil)
			if err != nil {
				return
			}
			if _, err := conn.Write(reply(binary.BigEndian.Uint32(rec))); err != nil {
				return
			}
		}
	})
}

// The TCP transport reads a DDP-eligible result its call located straight
// into Call.ReplyPayload, leaving it out of Body as an RDMA Write chunk
// does (Placed), and only when the reply is exactly what the locator and
// the length word say; anything else arrives inline (Placed -1) with
// every byte in Body.
func TestTCPPlacesLocatedResult(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096)[:40001] // pad 3
	big := 64 << 10
	tests := []struct {
		name   string
		verf   OpaqueAuth
		status uint32
		data   []byte // the result
		more   []byte // bytes after the result
		frags  []int  // sizes of the record fragments before the last
		locate func([]byte) int
		buf    int // ReplyPayload bytes
		placed bool
	}{
		{name: "placed", data: data, locate: testLocate, buf: big, placed: true},
		{name: "placed after a verifier", verf: OpaqueAuth{Flavor: AuthSys, Body: []byte("twelve bytes")}, data: data, locate: testLocate, buf: big, placed: true},
		{name: "buffer just large enough", data: data, locate: testLocate, buf: len(data), placed: true},
		{name: "no locator", data: data, buf: big},
		{name: "error status", status: 5, data: data, locate: testLocate, buf: big},
		{name: "not the last item", data: data, more: []byte{0, 0, 0, 1}, locate: testLocate, buf: big},
		{name: "larger than the buffer", data: data, locate: testLocate, buf: len(data) - 1},
		{name: "empty", locate: testLocate, buf: big},
		{name: "two fragments", data: data, frags: []int{100}, locate: testLocate, buf: big},
		{name: "locator past the peeked bytes", data: data, locate: func([]byte) int { return peekLen }, buf: big},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := func(xid uint32) []byte { return placementReply(xid, tt.verf, tt.status, tt.data, tt.more) }
			addr := replyServer(t, func(xid uint32) []byte { return fragments(msg(xid), tt.frags...) })
			ctx := testenv.Context(t, 10*time.Second)
			tr, err := DialTCP(ctx, addr, TCPOptions{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			for xid := uint32(1); xid <= 3; xid++ { // the reader stays in step
				buf := make([]byte, tt.buf)
				r, err := tr.RoundTrip(ctx, &Call{XID: xid, Msg: Message{Head: encodeCall(CallHeader{XID: xid, RPCVers: 2})},
					ReplyPayload: buf, LocateReplyPayload: tt.locate})
				if err != nil {
					t.Fatal(err)
				}
				want := msg(xid)
				if tt.placed {
					head := len(want) - len(tt.data) - xdr.Pad(len(tt.data))
					if r.Placed != len(tt.data) || !bytes.Equal(r.Body, want[:head]) || !bytes.Equal(buf[:len(tt.data)], tt.data) {
						t.Fatalf("xid %d: Placed %d, Body %d bytes (want %d, %d): result not placed as located", xid, r.Placed, len(r.Body), len(tt.data), head)
					}
				} else if r.Placed != -1 || !bytes.Equal(r.Body, want) || bytes.Contains(buf, data[:64]) {
					t.Fatalf("xid %d: Placed %d, Body %d bytes (sent %d): want the reply inline, the buffer untouched", xid, r.Placed, len(r.Body), len(want))
				}
				r.Release()
			}
		})
	}
}

// A reply whose result is being read into a caller's buffer holds the
// buffer until the read ends: a caller that gives up meanwhile waits at
// most stallWait more, then the connection is closed under the read and
// the caller gets its context's error. A connection that dies in the
// middle of a placed result fails the call with ErrConnLost.
func TestTCPPlacementInterrupted(t *testing.T) {
	data := make([]byte, 64<<10)
	for _, tt := range []struct {
		name  string
		close bool // the server closes instead of stalling
	}{{"stalled", false}, {"closed", true}} {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			addr := rawServer(t, func(conn net.Conn) {
				rr := recordReader{r: bufio.NewReader(conn), max: DefaultMaxRecordSize}
				rec, err := rr.readRecord(nil)
				if err != nil {
					return
				}
				reply := fragments(placementReply(binary.BigEndian.Uint32(rec), OpaqueAuth{}, 0, data, nil))
				conn.Write(reply[:len(reply)/2])
				if !tt.close {
					<-release
				}
			})
			defer close(release)
			ctx := testenv.Context(t, 10*time.Second)
			tr, err := DialTCP(ctx, addr, TCPOptions{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			callCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			buf := make([]byte, len(data))
			start := time.Now()
			r, err := tr.RoundTrip(callCtx, &Call{XID: 7, Msg: Message{Head: encodeCall(CallHeader{XID: 7, RPCVers: 2})},
				ReplyPayload: buf, LocateReplyPayload: testLocate})
			took := time.Since(start)
			if r != nil || err == nil {
				t.Fatalf("RoundTrip = %v, %v: want an error", r, err)
			}
			if tt.close {
				if !errors.Is(err, ErrConnLost) {
					t.Fatalf("err = %v, want ErrConnLost", err)
				}
				return
			}
			if !errors.Is(err, context.DeadlineExceeded) || took < stallWait || took > stallWait+5*time.Second {
				t.Fatalf("err = %v after %v, want the deadline's error after about 200ms + %v", err, took, stallWait)
			}
			select {
			case <-tr.Done():
			default:
				t.Fatal("the connection is still up after a stalled placed reply")
			}
		})
	}
}
