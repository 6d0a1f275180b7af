package siw

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// waitQueued waits until n bytes are queued for reading on c (SIOCINQ).
func waitQueued(t *testing.T, c *net.TCPConn, n int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var q int
		_ = rc.Control(func(fd uintptr) { q, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		if q >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes queued after 5 s, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSockReaderStream reads a stream written in random pieces with reads
// of random sizes (from 1 byte to several times the buffer), starting with
// bytes a handshake reader took, and gets every byte in order.
func TestSockReaderStream(t *testing.T) {
	w, r := testenv.TCPPair(t)
	rng := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, 8<<20)
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	const pending = 100
	go func() {
		for p := want[pending:]; len(p) > 0; {
			k := min(len(p), 1+rng.IntN(200<<10))
			if _, err := w.Write(p[:k]); err != nil {
				return
			}
			p = p[k:]
		}
	}()
	s, err := newSockReader(r, want[:pending])
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 0, len(want))
	rrng := rand.New(rand.NewPCG(3, 4))
	for len(got) < len(want) {
		var k int
		switch rrng.IntN(3) {
		case 0:
			k = 1 + rrng.IntN(16) // headers, trailers
		case 1:
			k = 1 + rrng.IntN(rxBufSize)
		default:
			k = 1 + rrng.IntN(100<<10) // payloads
		}
		k = min(k, len(want)-len(got))
		if err := s.readFull(got[len(got) : len(got)+k]); err != nil {
			t.Fatalf("readFull(%d) at %d: %v", k, len(got), err)
		}
		got = got[:len(got)+k]
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes read differ from the bytes written")
	}
	if s.buffered() != 0 {
		t.Fatalf("buffered() = %d after the whole stream", s.buffered())
	}
}

// TestSockReaderOneReadv: a large read whose bytes and the bytes after them
// are already queued takes them all in one readv, the following bytes into
// the buffer, so the next small reads need no system call.
func TestSockReaderOneReadv(t *testing.T) {
	w, r := testenv.TCPPair(t)
	msg := bytes.Repeat([]byte("payload!"), 8192) // 64 KiB
	trailer := []byte("CRC!next FPDU header")
	if _, err := w.Write(append(append([]byte{}, msg...), trailer...)); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, r, len(msg)+len(trailer))
	s, err := newSockReader(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if err := s.readFull(got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("payload differs")
	}
	if s.buffered() != len(trailer) {
		t.Fatalf("buffered() = %d after the payload, want the %d bytes after it", s.buffered(), len(trailer))
	}
	// no more bytes on the socket: these reads must come from the buffer
	_ = r.SetReadDeadline(time.Unix(1, 0))
	tr := make([]byte, len(trailer))
	if err := s.readFull(tr); err != nil {
		t.Fatalf("reading the buffered trailer: %v", err)
	}
	if !bytes.Equal(tr, trailer) {
		t.Fatalf("trailer %q, want %q", tr, trailer)
	}
}

// TestSockReaderRefillSize: while the stream carries small messages a read
// from the socket fills the whole buffer (one readv takes several
// messages); after a large payload it takes only rxBulkTail bytes into the
// buffer, so that the payload after the next header is placed straight into
// its destination; a small payload switches back.
func TestSockReaderRefillSize(t *testing.T) {
	w, r := testenv.TCPPair(t)
	s, err := newSockReader(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 20)
	small := bytes.Repeat([]byte("s"), 2000)
	var msgs []byte
	for range 12 {
		msgs = append(append(msgs, hdr...), small...)
	}
	readMsgs := func(t *testing.T, wantBuffered func(int) bool) {
		t.Helper()
		if _, err := w.Write(msgs); err != nil {
			t.Fatal(err)
		}
		waitQueued(t, r, len(msgs))
		h, p := make([]byte, len(hdr)), make([]byte, len(small))
		if err := s.readFull(h); err != nil {
			t.Fatal(err)
		}
		if b := s.buffered(); !wantBuffered(b) {
			t.Fatalf("buffered() = %d after the first header", b)
		}
		for i := range 12 {
			if i > 0 {
				if err := s.readFull(h); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.readFull(p); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p, small) {
				t.Fatalf("message %d differs", i)
			}
		}
	}
	// a fresh stream: one readv takes all 12 messages
	readMsgs(t, func(b int) bool { return b == len(msgs)-len(hdr) })
	// a large payload, then the same messages: the first refill stops at
	// rxBulkTail; the small payloads switch back
	big := make([]byte, 64<<10)
	if _, err := w.Write(big); err != nil {
		t.Fatal(err)
	}
	if err := s.readFull(big); err != nil {
		t.Fatal(err)
	}
	readMsgs(t, func(b int) bool { return b == rxBulkTail })
	readMsgs(t, func(b int) bool { return b == len(msgs)-len(hdr) })
}

// TestSockReaderEnd: the peer's close is io.EOF at a read boundary and
// io.ErrUnexpectedEOF inside a read; a deadline in the past (how the QP
// stops its receive path) is a *net.OpError for os.ErrDeadlineExceeded; a
// closed socket is net.ErrClosed.
func TestSockReaderEnd(t *testing.T) {
	t.Run("eof", func(t *testing.T) {
		w, r := testenv.TCPPair(t)
		_, _ = w.Write([]byte("abcdef"))
		_ = w.CloseWrite()
		s, err := newSockReader(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 4)
		if err := s.readFull(p); err != nil {
			t.Fatal(err)
		}
		if err := s.readFull(p); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("read across the end: %v, want io.ErrUnexpectedEOF", err)
		}
		if err := s.readFull(p); !errors.Is(err, io.EOF) {
			t.Fatalf("read at the end: %v, want io.EOF", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		_, r := testenv.TCPPair(t)
		s, err := newSockReader(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.readFull(make([]byte, 10)) }()
		time.Sleep(20 * time.Millisecond) // parked waiting for data
		_ = r.SetReadDeadline(time.Unix(1, 0))
		select {
		case err := <-done:
			var oe *net.OpError
			if !errors.As(err, &oe) || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("got %v, want a *net.OpError for os.ErrDeadlineExceeded", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("readFull did not return after the deadline passed")
		}
	})
	t.Run("closed", func(t *testing.T) {
		_, r := testenv.TCPPair(t)
		s, err := newSockReader(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		if err := s.readFull(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("got %v, want net.ErrClosed", err)
		}
	})
}

// TestSockReaderNoAllocs: a read allocates nothing (the receive path is
// allocation-free).
func TestSockReaderNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	w, r := testenv.TCPPair(t)
	s, err := newSockReader(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 70<<10)
	go func() {
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}()
	p := make([]byte, 66<<10)
	hdr := make([]byte, 8)
	allocs := testing.AllocsPerRun(200, func() {
		if err := s.readFull(hdr); err != nil {
			t.Fatal(err)
		}
		if err := s.readFull(p); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per read, want 0", allocs)
	}
}
