package siw

import (
	"context"
	"net"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// pingPongPair connects a pair for the 64-byte ping-pongs: 16 receives of
// 64 bytes posted on each end (crb, srb) and a 64-byte send buffer each
// (cbuf, sbuf).
func pingPongPair(b *testing.B) (c, s *end, crb, srb, cbuf, sbuf verbs.MR) {
	c, s = pair(b, Config{}, Config{}, verbs.QPAttr{}, func(s *end) {
		srb = regMR(b, s, 64*16, verbs.AccessLocalWrite)
		for i := 0; i < 16; i++ {
			s.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{srb.SGE(64*i, 64)}})
		}
	})
	crb = regMR(b, c, 64*16, verbs.AccessLocalWrite)
	for i := 0; i < 16; i++ {
		c.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{crb.SGE(64*i, 64)}})
	}
	return c, s, crb, srb, regMR(b, c, 64, 0), regMR(b, s, 64, 0)
}

// BenchmarkSendPingPong64Handler is BenchmarkSendPingPong64 with both
// ends answering in their receive CQ's handler (verbs.CQHandler), as an
// RPC-over-RDMA endpoint does: the echo is posted from the receive
// goroutine that delivered the ping, and the next ping from the one that
// delivered the pong, with no hand-off to another goroutine.
func BenchmarkSendPingPong64Handler(b *testing.B) {
	c, s, crb, srb, cbuf, sbuf := pingPongPair(b)
	// answer polls e's receive CQ and, for each receive, reposts it and
	// calls next, which reports whether to send again
	answer := func(e *end, buf, rb verbs.MR, next func() bool) func() {
		var wc [4]verbs.WC
		rwr := verbs.RecvWR{SGL: make([]verbs.SGE, 1)}
		swr := verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{buf.SGE(0, 64)}}
		return func() {
			for {
				k := e.rcq.Poll(wc[:])
				if k == 0 {
					return
				}
				for _, w := range wc[:k] {
					rwr.ID, rwr.SGL[0] = w.ID, rb.SGE(64*int(w.ID), 64)
					e.qp.PostRecv(&rwr)
					if next() {
						e.qp.PostSend(&swr)
					}
				}
			}
		}
	}
	s.rcq.(verbs.CQHandler).SetHandler(answer(s, sbuf, srb, func() bool { return true }))
	done := make(chan struct{})
	var pongs int
	c.rcq.(verbs.CQHandler).SetHandler(answer(c, cbuf, crb, func() bool {
		pongs++
		if pongs == b.N {
			close(done)
			return false
		}
		return true
	}))
	b.ReportAllocs()
	b.ResetTimer()
	c.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{cbuf.SGE(0, 64)}})
	<-done
}

// BenchmarkSendPingPong64 is the bare verbs 64-byte Send ping-pong (one op
// = one round trip), beside BenchmarkTCPPingPong64 on the same machine.
func BenchmarkSendPingPong64(b *testing.B) {
	c, s, crb, srb, cbuf, sbuf := pingPongPair(b)
	ctx := context.Background()
	echo := func(e *end, buf, rb verbs.MR, n int) {
		var wc [4]verbs.WC
		rwr := verbs.RecvWR{SGL: make([]verbs.SGE, 1)}
		swr := verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{buf.SGE(0, 64)}}
		for done := 0; done < n; {
			k := e.rcq.Poll(wc[:])
			if k == 0 {
				e.rcq.Wait(ctx)
				continue
			}
			for _, w := range wc[:k] {
				rwr.ID, rwr.SGL[0] = w.ID, rb.SGE(64*int(w.ID), 64)
				e.qp.PostRecv(&rwr)
				e.qp.PostSend(&swr)
				done++
			}
		}
	}
	go echo(s, sbuf, srb, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	var wc [4]verbs.WC
	rwr := verbs.RecvWR{SGL: make([]verbs.SGE, 1)}
	swr := verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{cbuf.SGE(0, 64)}}
	for i := 0; i < b.N; i++ {
		c.qp.PostSend(&swr)
		for {
			if k := c.rcq.Poll(wc[:1]); k == 1 {
				rwr.ID, rwr.SGL[0] = wc[0].ID, crb.SGE(64*int(wc[0].ID), 64)
				c.qp.PostRecv(&rwr)
				break
			}
			c.rcq.Wait(ctx)
		}
	}
}

func BenchmarkTCPPingPong64(b *testing.B) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		buf := make([]byte, 64)
		for {
			if _, err := readFull(s, buf); err != nil {
				return
			}
			s.Write(buf)
		}
	}()
	c, _ := net.Dial("tcp", ln.Addr().String())
	defer c.Close()
	buf := make([]byte, 64)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Write(buf)
		readFull(c, buf)
	}
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}
