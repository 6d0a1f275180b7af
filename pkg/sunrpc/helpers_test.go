package sunrpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// TestMain fails the run if goroutines started by the tests outlive them.
func TestMain(m *testing.M) { testenv.MainCheckingLeaks(m) }

const (
	testProg = 0x20000099
	// procedures of the test program
	procEcho    = 1
	procGarbage = 2
	procFail    = 3
	procWhoAmI  = 4
	procBlock   = 5
	procPanic   = 6
	procDeny    = 7
	procTag     = 8
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testHandlers are the procedures of testProg.
func testHandlers() []Handler {
	return []Handler{
		procEcho: func(ctx context.Context, req *Request, res *Builder) error {
			d := req.ArgsDecoder()
			data := req.Payload(d, 1<<20)
			if err := d.Err(); err != nil {
				return err
			}
			if len(data) >= 8 {
				res.Payload(data) // DDP-eligible result, gathered by writev
			} else {
				res.Opaque(data)
			}
			res.Uint32(0xdeadbeef) // something in the tail
			return nil
		},
		procGarbage: func(ctx context.Context, req *Request, res *Builder) error {
			d := req.ArgsDecoder()
			d.Uint64()
			return d.Err()
		},
		procFail: func(ctx context.Context, req *Request, res *Builder) error {
			res.Uint32(1) // discarded
			return errors.New("disk on fire")
		},
		procWhoAmI: func(ctx context.Context, req *Request, res *Builder) error {
			res.Uint32(uint32(req.Cred.Flavor))
			res.Uint32(req.Cred.Sys.UID)
			res.Uint32(req.Cred.Sys.GID)
			res.Uint32(uint32(len(req.Cred.Sys.GIDs)))
			for _, g := range req.Cred.Sys.GIDs {
				res.Uint32(g)
			}
			res.String(req.Cred.Sys.MachineName)
			res.String(req.Transport)
			return nil
		},
		procBlock: func(ctx context.Context, req *Request, res *Builder) error {
			<-ctx.Done()
			return ctx.Err()
		},
		procPanic: func(ctx context.Context, req *Request, res *Builder) error {
			panic("handler bug")
		},
		procDeny: func(ctx context.Context, req *Request, res *Builder) error {
			return &AuthError{Stat: AuthTooWeak}
		},
	}
}

func newTestServer() *Server {
	s := NewServer(quiet)
	s.Register(testProg, 2, testHandlers())
	s.Register(testProg, 3, testHandlers())
	return s
}

// serveTCP runs ServeTCP on a loopback listener until stop is called (or
// the test ends). stop waits for the server to return.
func serveTCP(t testing.TB, d Dispatcher, opts TCPOptions) (addr string, stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveListener(t, l, d, opts)
}

func serveListener(t testing.TB, l net.Listener, d Dispatcher, opts TCPOptions) (addr string, stop func()) {
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeTCP(ctx, l, d, opts) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("ServeTCP: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return l.Addr().String(), stop
}

func newTestClient(t testing.TB, addr string, opts ClientOptions) *Client {
	t.Helper()
	c, err := NewClient(TCPDialer(addr, TCPOptions{Logger: quiet}), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echoCall sends data to procEcho as a DDP-eligible argument and returns
// what came back.
func echoCall(ctx context.Context, c *Client, data []byte) ([]byte, error) {
	var out []byte
	err := c.Call(ctx, CallSpec{
		Prog: testProg, Vers: 3, Proc: procEcho,
		Args: func(b *Builder) { b.Payload(data) },
		Results: func(d *xdr.Decoder, placed int) error {
			if placed != -1 {
				return fmt.Errorf("placed = %d over TCP, want -1", placed)
			}
			out = bytes.Clone(d.Opaque(1 << 20))
			if v := d.Uint32(); d.Err() == nil && v != 0xdeadbeef {
				return fmt.Errorf("tail word %#x", v)
			}
			if d.Err() == nil && d.Remaining() != 0 {
				return fmt.Errorf("%d trailing bytes", d.Remaining())
			}
			return d.Err()
		},
	})
	return out, err
}

// encodeCall builds a call message by hand, for malformed-call tests.
func encodeCall(h CallHeader, args ...uint32) []byte {
	e := xdr.NewEncoder(nil)
	h.Encode(e)
	for _, a := range args {
		e.Uint32(a)
	}
	return e.Bytes()
}

// rawRoundTrip sends msg on tr and decodes the reply header.
func rawRoundTrip(ctx context.Context, tr ClientTransport, msg []byte) (ReplyHeader, error) {
	xid := uint32(0)
	if len(msg) >= 4 {
		xid = uint32(msg[0])<<24 | uint32(msg[1])<<16 | uint32(msg[2])<<8 | uint32(msg[3])
	}
	r, err := tr.RoundTrip(ctx, &Call{XID: xid, Msg: Message{Head: msg}})
	if err != nil {
		return ReplyHeader{}, err
	}
	defer r.Release()
	return DecodeReplyHeader(xdr.NewDecoder(r.Body))
}
