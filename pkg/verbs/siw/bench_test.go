package siw

import (
	"context"
	"net"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// BenchmarkSendPingPong64 is the bare verbs 64-byte Send ping-pong (one op
// = one round trip), beside BenchmarkTCPPingPong64 on the same machine.
func BenchmarkSendPingPong64(b *testing.B) {
	var srb verbs.MR
	c, s := pair(b, Config{}, Config{}, verbs.QPAttr{}, func(s *end) {
		srb = regMR(b, s, 64*16, verbs.AccessLocalWrite)
		for i := 0; i < 16; i++ {
			s.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{srb.SGE(64*i, 64)}})
		}
	})
	crb := regMR(b, c, 64*16, verbs.AccessLocalWrite)
	for i := 0; i < 16; i++ {
		c.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{crb.SGE(64*i, 64)}})
	}
	sbuf := regMR(b, s, 64, 0)
	cbuf := regMR(b, c, 64, 0)
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
