package siw

import (
	"io"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// sockReader is the receive side of a connection's TCP socket: the MPA
// stream's reads (headers, payloads, trailers) go through it.
//
// Every read from the socket is one readv(2) whose first vector is the rest
// of the caller's destination and whose second is the buffer (rxBufSize
// bytes; its first rxBulkTail while the stream carries large payloads), so
// a payload is placed straight into its buffer (an STag's region, a posted
// receive) and the bytes that follow it on the stream, usually the pad and
// CRC and the next FPDU's header, or the next few small messages, arrive in
// the same system call.
// Reading through a bufio.Reader instead took about four read(2) calls per
// 64 KiB FPDU on loopback (the trailer and the next header always a read of
// their own); this takes about two, one per piece of about 32 KiB as the
// sender's segments arrive, and one when the whole FPDU is already queued.
//
// Not safe for concurrent use: the receive goroutine owns it.
type sockReader struct {
	rc   syscall.RawConn
	buf  []byte
	r, w int // buf[r:w] holds stream bytes not yet consumed
	// bulk: the last payload-sized read (more than rxSmallRead octets) was
	// at least rxBulkPayload octets; a refill then takes only rxBulkTail
	// octets into buf
	bulk bool

	// the readv in progress, set before rc.Read calls readFn
	vecs  [2][]byte
	n     int
	errno error
	// readFn is the rc.Read callback, made once so that a read allocates
	// nothing.
	readFn func(fd uintptr) bool
}

// newSockReader reads c, starting with pending: the bytes a handshake
// reader already took from the socket beyond the MPA frame.
func newSockReader(c *net.TCPConn, pending []byte) (*sockReader, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &sockReader{rc: rc, buf: make([]byte, max(rxBufSize, len(pending)))}
	s.w = copy(s.buf, pending)
	s.readFn = func(fd uintptr) bool {
		for {
			s.n, s.errno = unix.Readv(int(fd), s.vecs[:])
			if s.errno != unix.EINTR {
				return s.errno != unix.EAGAIN // EAGAIN: rc.Read waits for data
			}
		}
	}
	return s, nil
}

// Refill sizes. While the stream carries large payloads (a payload-sized
// read of rxBulkPayload octets or more last) a refill takes only
// rxBulkTail octets into the buffer, so that little payload is copied
// through it (measured on loopback, a 4 KiB tail gives ~15% more RDMA
// Write bandwidth and ~9% lower Send latency than 64 KiB); while it
// carries small messages (RPC calls and replies of a few KiB) a refill
// fills the whole buffer (rxBufSize), so that one readv(2) takes several
// messages (random 4 KiB NFS READs with 8 callers: 1.1 readv per call
// instead of 1.95). A read of at most rxSmallRead octets (headers,
// markers, pads and CRCs) says nothing of the payload sizes.
const (
	rxBulkTail    = 4 << 10
	rxBulkPayload = 16 << 10
	rxSmallRead   = 64
)

// buffered is the number of stream bytes read from the socket and not yet
// consumed.
func (s *sockReader) buffered() int { return s.w - s.r }

// readFull fills p from the stream, as io.ReadFull: io.EOF when the stream
// ended before any of p, io.ErrUnexpectedEOF when it ended inside p. A
// socket error comes back as a *net.OpError (a deadline set on the
// connection, which stops the receive path, as os.ErrDeadlineExceeded
// inside one; a closed connection as net.ErrClosed inside one).
func (s *sockReader) readFull(p []byte) error {
	switch {
	case len(p) >= rxBulkPayload:
		s.bulk = true
	case len(p) > rxSmallRead:
		s.bulk = false
	}
	k := copy(p, s.buf[s.r:s.w])
	s.r += k
	got := k
	for got < len(p) {
		// the buffer is empty here: the readv fills the rest of p first,
		// then the buffer with what follows on the stream
		s.r, s.w = 0, 0
		s.vecs[0], s.vecs[1] = p[got:], s.buf
		if s.bulk {
			s.vecs[1] = s.buf[:rxBulkTail]
		}
		err := s.rc.Read(s.readFn)
		n, errno := s.n, s.errno
		s.vecs[0], s.vecs[1] = nil, nil
		if err == nil && errno != nil {
			err = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("readv", errno)}
		}
		if err != nil {
			return err
		}
		if n == 0 {
			if got == 0 {
				return io.EOF
			}
			return io.ErrUnexpectedEOF
		}
		if rest := len(p) - got; n > rest {
			s.w = n - rest
			n = rest
		}
		got += n
	}
	return nil
}
