package sunrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// rawServer accepts one connection on loopback and runs handle on it.
func rawServer(t testing.TB, handle func(conn net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		handle(conn)
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}

// echoReply is a SUCCESS reply to call whose result is the call's first
// argument word.
func echoReply(t *testing.T, call []byte) []byte {
	d := xdr.NewDecoder(call)
	h, err := DecodeCallHeader(d)
	if err != nil {
		t.Errorf("server: %v", err)
		return nil
	}
	e := xdr.NewEncoder(nil)
	rh := acceptedReply(h.XID, Success)
	rh.Encode(e)
	e.Uint32(d.Uint32())
	return e.Bytes()
}

func wordCall(ctx context.Context, c *Client, v uint32) error {
	var got uint32
	err := c.Call(ctx, CallSpec{Prog: testProg, Vers: 1, Proc: 1,
		Args:    func(b *Builder) { b.Uint32(v) },
		Results: func(d *xdr.Decoder, _ int) error { got = d.Uint32(); return d.Err() }})
	if err == nil && got != v {
		err = fmt.Errorf("call %d got the reply of %d", v, got)
	}
	return err
}

// The server answers in reverse order, each reply split into small
// fragments with an empty one among them; the client matches by XID.
func TestRepliesOutOfOrderAndFragmented(t *testing.T) {
	const n = 16
	addr := rawServer(t, func(conn net.Conn) {
		rr := recordReader{r: bufio.NewReader(conn), max: DefaultMaxRecordSize}
		var replies [][]byte
		for range n {
			rec, err := rr.readRecord(nil)
			if err != nil {
				t.Errorf("server: %v", err)
				return
			}
			replies = append(replies, echoReply(t, rec))
		}
		for i := n - 1; i >= 0; i-- {
			for _, f := range bytes.SplitAfter(fragments(replies[i], 1, 3, 0, 5, 8), nil) {
				if _, err := conn.Write(f); err != nil { // one write per byte: many partial reads
					t.Errorf("server: %v", err)
					return
				}
			}
		}
		io.Copy(io.Discard, conn)
	})
	c := newTestClient(t, addr, ClientOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	var wg sync.WaitGroup
	for i := range uint32(n) {
		wg.Go(func() {
			if err := wordCall(ctx, c, 1000+i); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// A reply record over the limit kills the connection with ErrRecordTooLarge
// (wrapped in ErrConnLost), without reading or allocating it.
func TestClientRefusesOversizedRecord(t *testing.T) {
	addr := rawServer(t, func(conn net.Conn) {
		rr := recordReader{r: conn, max: DefaultMaxRecordSize}
		if _, err := rr.readRecord(nil); err != nil {
			t.Errorf("server: %v", err)
			return
		}
		conn.Write([]byte{0xff, 0xff, 0xff, 0xf0}) // last fragment, ~2 GiB
		io.Copy(io.Discard, conn)
	})
	ctx := testenv.Context(t, 10*time.Second)
	tr, err := DialTCP(ctx, addr, TCPOptions{MaxRecordSize: 4096, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = rawRoundTrip(ctx, tr, encodeCall(CallHeader{XID: 1, RPCVers: 2}))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrConnLost) || !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("err = %v, want ErrConnLost and ErrRecordTooLarge", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("allocated %d bytes", grew)
	}
	select {
	case <-tr.Done():
	case <-ctx.Done():
		t.Fatal("transport not done")
	}
}

// A call record over the limit, in one fragment or several, closes the
// server connection; a call within the limit, fragmented, is served.
func TestServerRecordLimits(t *testing.T) {
	const limit = 4096
	addr, _ := serveTCP(t, newTestServer(), TCPOptions{MaxRecordSize: limit})
	ctx := testenv.Context(t, 10*time.Second)
	dl, _ := ctx.Deadline()
	call := encodeCall(CallHeader{XID: 77, RPCVers: 2, Prog: testProg, Vers: 3, Proc: procEcho}, 3, 0x61626300)

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(dl)
	if _, err := conn.Write(fragments(call, 1, 2, 0, 7, 13)); err != nil {
		t.Fatal(err)
	}
	rr := recordReader{r: conn, max: DefaultMaxRecordSize}
	rec, err := rr.readRecord(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := xdr.NewDecoder(rec)
	rh, err := DecodeReplyHeader(d)
	if err != nil || rh.XID != 77 || rh.Err() != nil || string(d.Opaque(10)) != "abc" {
		t.Fatalf("reply %+v, %v", rh, err)
	}

	for name, stream := range map[string][]byte{
		"one huge fragment":      {0xff, 0xff, 0xff, 0xff},
		"limit + 1":              binary.BigEndian.AppendUint32(nil, lastFragment|(limit+1)),
		"fragments over a limit": fragments(make([]byte, limit+100), 2000, 2000, 2000),
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(dl)
		conn.Write(stream)
		// The server closes the connection: our read ends (EOF or reset)
		// without any reply.
		n, err := io.Copy(io.Discard, conn)
		conn.Close()
		if n != 0 || (err != nil && errors.Is(err, context.DeadlineExceeded)) {
			t.Fatalf("%s: read %d bytes, %v", name, n, err)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%s: connection not closed", name)
		}
	}
}

// A reply larger than the record limit becomes SYSTEM_ERR, and its
// AfterSend hook still runs.
func TestServerReplyTooLarge(t *testing.T) {
	var hooks atomic.Int32
	srv := NewServer(quiet)
	srv.Register(testProg, 1, []Handler{1: func(ctx context.Context, req *Request, res *Builder) error {
		res.Payload(make([]byte, 8192))
		res.AfterSend(func() { hooks.Add(1) })
		return nil
	}})
	addr, _ := serveTCP(t, srv, TCPOptions{MaxRecordSize: 4096})
	c := newTestClient(t, addr, ClientOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	if err := c.Call(ctx, CallSpec{Prog: testProg, Vers: 1, Proc: 1}); !errors.Is(err, ErrSystemErr) {
		t.Fatalf("err = %v, want ErrSystemErr", err)
	}
	if hooks.Load() != 1 {
		t.Fatalf("AfterSend ran %d times", hooks.Load())
	}
}

// The transport works on any net.Conn, and a RoundTrip whose ctx ends
// leaves the connection usable; a late reply is discarded.
func TestTransportCancelAndLateReply(t *testing.T) {
	a, b := net.Pipe()
	tr := NewTCPTransport(a, TCPOptions{})
	defer tr.Close()
	srvDone := make(chan struct{})
	go func() {
		defer close(srvDone)
		rr := recordReader{r: b, max: DefaultMaxRecordSize}
		w := recordWriter{conn: b}
		first, err := rr.readRecord(nil)
		if err != nil {
			return
		}
		second, err := rr.readRecord(nil)
		if err != nil {
			return
		}
		for _, rec := range [][]byte{first, second} { // the late one first
			m := Message{Head: echoReply(t, rec)}
			w.write(&m)
		}
		io.Copy(io.Discard, b)
	}()
	ctx := testenv.Context(t, 10*time.Second)
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := rawRoundTrip(sctx, tr, encodeCall(CallHeader{XID: 1, RPCVers: 2}, 11))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	r, err := tr.RoundTrip(ctx, &Call{XID: 2, Msg: Message{Head: encodeCall(CallHeader{XID: 2, RPCVers: 2}, 22)}})
	if err != nil {
		t.Fatal(err)
	}
	if v := binary.BigEndian.Uint32(r.Body[len(r.Body)-4:]); v != 22 {
		t.Fatalf("reply %d", v)
	}
	r.Release()
	tr.Close()
	b.Close()
	<-srvDone
	if _, err := tr.RoundTrip(ctx, &Call{XID: 3, Msg: Message{Head: encodeCall(CallHeader{XID: 3, RPCVers: 2})}}); !errors.Is(err, ErrConnLost) || !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestDuplicateXID(t *testing.T) {
	ts := &tagServer{xids: map[uint32][]uint32{}, block: func(uint32) bool { return true }}
	addr, _ := serveTCP(t, ts.server(), TCPOptions{})
	ctx := testenv.Context(t, 10*time.Second)
	tr, err := DialTCP(ctx, addr, TCPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	msg := encodeCall(CallHeader{XID: 5, RPCVers: 2, Prog: testProg, Vers: 3, Proc: procTag}, 1)
	first := make(chan error, 1)
	go func() { _, err := rawRoundTrip(ctx, tr, msg); first <- err }()
	for {
		ts.mu.Lock()
		n := len(ts.xids)
		ts.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if _, err := rawRoundTrip(ctx, tr, msg); !errors.Is(err, ErrDuplicateXID) {
		t.Fatalf("err = %v, want ErrDuplicateXID", err)
	}
	tr.Close()
	if err := <-first; !errors.Is(err, ErrConnLost) {
		t.Fatalf("first call: %v", err)
	}
}

// BenchmarkNullTCP measures NULL calls over TCP loopback, client and server
// in this process, with 1 and 16 calls outstanding, against a baseline: the
// same bytes (a 44-byte call, a 28-byte reply) ping-ponged over a raw
// loopback connection. Compare the ratios, not the absolute times.
func BenchmarkNullTCP(b *testing.B) {
	b.Run("baseline=raw-pingpong", func(b *testing.B) {
		addr := rawServer(b, func(conn net.Conn) {
			req, resp := make([]byte, 44), make([]byte, 28)
			for {
				if _, err := io.ReadFull(conn, req); err != nil {
					return
				}
				if _, err := conn.Write(resp); err != nil {
					return
				}
			}
		})
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		req, resp := make([]byte, 44), make([]byte, 28)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := conn.Write(req); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(conn, resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, outstanding := range []int{1, 16} {
		b.Run(fmt.Sprintf("outstanding=%d", outstanding), func(b *testing.B) {
			addr, _ := serveTCP(b, newTestServer(), TCPOptions{})
			c := newTestClient(b, addr, ClientOptions{})
			ctx := context.Background()
			if err := c.Null(ctx, testProg, 3); err != nil {
				b.Fatal(err)
			}
			spec := CallSpec{Prog: testProg, Vers: 3}
			var left atomic.Int64
			left.Store(int64(b.N))
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range outstanding {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						if err := c.Call(ctx, spec); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// When the peer goes away, ServeTCPConn cancels the handlers' ctx and
// returns, even with a handler waiting on it.
func TestServeTCPConnEndsWithPeer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := testenv.Context(t, 10*time.Second)
	started := make(chan struct{})
	srv := NewServer(quiet)
	srv.Register(testProg, 1, []Handler{1: func(ctx context.Context, req *Request, res *Builder) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}})
	served := make(chan error, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			served <- err
			return
		}
		served <- ServeTCPConn(context.Background(), conn, srv, TCPOptions{Logger: quiet})
	}()
	tr, err := DialTCP(ctx, l.Addr().String(), TCPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go rawRoundTrip(ctx, tr, encodeCall(CallHeader{XID: 1, RPCVers: 2, Prog: testProg, Vers: 1, Proc: 1}))
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("handler not started")
	}
	tr.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("ServeTCPConn: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("ServeTCPConn still running after the peer left")
	}
}
