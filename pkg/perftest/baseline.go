package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// tcpPair is a raw TCP connection over the loopback interface: the
// baseline every RDMA number is set beside.
type tcpPair struct {
	c, s net.Conn // client and server ends
	stop func() bool
}

// newTCPPair connects a client and a server socket on 127.0.0.1. Both are
// closed when ctx ends, which unblocks any Read or Write on them.
func newTCPPair(ctx context.Context) (*tcpPair, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("perftest: baseline: %w", err)
	}
	defer ln.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	ac := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ac <- accepted{c, err}
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return nil, fmt.Errorf("perftest: baseline: %w", err)
	}
	var a accepted
	select {
	case a = <-ac:
	case <-ctx.Done():
		_ = c.Close()
		return nil, ctx.Err()
	}
	if a.err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("perftest: baseline: %w", a.err)
	}
	p := &tcpPair{c: c, s: a.c}
	p.stop = context.AfterFunc(ctx, func() { p.close() })
	return p, nil
}

func (p *tcpPair) close() {
	_ = p.c.Close()
	_ = p.s.Close()
}

// release closes the pair and stops watching the context.
func (p *tcpPair) release() {
	p.stop()
	p.close()
}

// stream copies iters messages of size bytes from src to dst (one stream,
// the receiver reading each message whole) and returns the time from the
// first byte sent to the receiver's acknowledgement of the last. On error
// it closes both ends.
func stream(src, dst net.Conn, size, iters int) (time.Duration, error) {
	rerr := make(chan error, 1)
	go func() {
		buf := make([]byte, size)
		for i := 0; i < iters; i++ {
			if _, err := io.ReadFull(dst, buf); err != nil {
				rerr <- err
				return
			}
		}
		_, err := dst.Write([]byte{1})
		rerr <- err
	}()
	buf := make([]byte, size)
	var ack [1]byte
	start := time.Now()
	fail := func(err error) error {
		_, _ = src.Close(), dst.Close() // unblock the receiver
		return fmt.Errorf("perftest: baseline stream: %w", errors.Join(err, <-rerr))
	}
	for i := 0; i < iters; i++ {
		if _, err := src.Write(buf); err != nil {
			return 0, fail(err)
		}
	}
	if _, err := io.ReadFull(src, ack[:]); err != nil {
		return 0, fail(err)
	}
	elapsed := time.Since(start)
	if err := <-rerr; err != nil {
		return 0, fmt.Errorf("perftest: baseline receiver: %w", err)
	}
	return elapsed, nil
}

// echo answers iters pings of size bytes on the server end.
func (p *tcpPair) echo(size, iters int) error {
	buf := make([]byte, size)
	for i := 0; i < iters; i++ {
		if _, err := io.ReadFull(p.s, buf); err != nil {
			return err
		}
		if _, err := p.s.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// pingPong sends ping, reads the echo into pong and returns the round-trip
// time.
func (p *tcpPair) pingPong(ping, pong []byte) (time.Duration, error) {
	start := time.Now()
	if _, err := p.c.Write(ping); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(p.c, pong); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// runTCP measures opts' byte movement over a raw TCP loopback socket: one
// stream copy for the bandwidth tests (server to client for read_bw), a
// ping-pong of the same size for send_lat.
func runTCP(ctx context.Context, opts Options) (Result, error) {
	res := Result{Test: opts.Test, Transport: "tcp", SizeBytes: int64(opts.Size), Iters: opts.Iters, Depth: 1}
	p, err := newTCPPair(ctx)
	if err != nil {
		return res, err
	}
	defer p.release()
	size := int(opts.Size)
	switch opts.Test {
	case SendLat:
		errc := make(chan error, 1)
		go func() { errc <- p.echo(size, opts.Iters) }()
		ping, pong := make([]byte, size), make([]byte, size)
		rtts := make([]time.Duration, opts.Iters)
		start := time.Now()
		for i := range rtts {
			if rtts[i], err = p.pingPong(ping, pong); err != nil {
				p.close()
				return res, fmt.Errorf("perftest: baseline ping-pong: %w", errors.Join(err, <-errc))
			}
		}
		res.setRate(time.Since(start))
		res.Latency = latency(rtts)
		if err := <-errc; err != nil {
			return res, fmt.Errorf("perftest: baseline echo: %w", err)
		}
	case ReadBW:
		elapsed, err := stream(p.s, p.c, size, opts.Iters)
		if err != nil {
			return res, err
		}
		res.setRate(elapsed)
	default:
		elapsed, err := stream(p.c, p.s, size, opts.Iters)
		if err != nil {
			return res, err
		}
		res.setRate(elapsed)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}
