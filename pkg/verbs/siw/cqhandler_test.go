package siw

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// TestCQHandler: with a handler set (verbs.CQHandler), a receive
// completion runs it on the receive goroutine instead of waking Wait; the
// completion is in the queue when it runs; send completions and flushed
// receives still wake Wait; SetHandler(nil) gives receives back to Wait.
func TestCQHandler(t *testing.T) {
	var srb verbs.MR
	c, s := pair(t, Config{}, Config{}, verbs.QPAttr{}, func(s *end) {
		srb = regMR(t, s, 64*8, verbs.AccessLocalWrite)
		for i := range 8 {
			if err := s.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{srb.SGE(64*i, 64)}}); err != nil {
				t.Fatal(err)
			}
		}
	})
	buf := regMR(t, c, 64, 0)
	copy(buf.Bytes(), "ping")
	var calls atomic.Int32
	got := make(chan verbs.WC, 8)
	h := s.rcq.(verbs.CQHandler)
	h.SetHandler(func() {
		calls.Add(1)
		var wc [4]verbs.WC
		for {
			k := s.rcq.Poll(wc[:])
			if k == 0 {
				return
			}
			for _, w := range wc[:k] {
				got <- w
			}
		}
	})
	send := func(id uint64, signaled bool) {
		t.Helper()
		wr := verbs.SendWR{ID: id, Opcode: verbs.WRSend, SGL: []verbs.SGE{buf.SGE(0, 64)}}
		if signaled {
			wr.Flags = verbs.SendSignaled
		}
		if err := c.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		send(uint64(i), false)
		select {
		case w := <-got:
			if w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRecv || w.ID != uint64(i) || w.ByteLen != 64 {
				t.Fatalf("receive %d in the handler: %+v", i, w)
			}
			if string(srb.Bytes()[64*i:][:4]) != "ping" {
				t.Fatalf("receive %d: buffer %q", i, srb.Bytes()[64*i:][:4])
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("receive %d: the handler did not run", i)
		}
	}
	if n := calls.Load(); n < 1 || n > 3 {
		t.Fatalf("handler ran %d times for 3 receives", n)
	}
	// nothing was left for Wait
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := s.rcq.Wait(ctx)
	cancel()
	if err == nil {
		t.Fatal("Wait woke up for receives the handler took")
	}

	// send completions are not the handler's: they wake Wait
	send(100, true)
	var wc [1]verbs.WC
	if err := c.scq.Wait(testenv.Context(t, 20*time.Second)); err != nil {
		t.Fatal("send CQ Wait:", err)
	}
	if c.scq.Poll(wc[:]) != 1 || wc[0].ID != 100 || wc[0].Status != verbs.WCSuccess {
		t.Fatalf("send completion: %+v", wc[0])
	}
	<-got // its receive, in the handler

	// without the handler, receives wake Wait again
	h.SetHandler(nil)
	send(101, false)
	if err := s.rcq.Wait(testenv.Context(t, 20*time.Second)); err != nil {
		t.Fatal("receive CQ Wait after SetHandler(nil):", err)
	}
	if s.rcq.Poll(wc[:]) != 1 || wc[0].Status != verbs.WCSuccess || wc[0].Opcode != verbs.WCRecv {
		t.Fatalf("receive after SetHandler(nil): %+v", wc[0])
	}

	// flushed receives (the QP closed) wake Wait even with a handler
	h.SetHandler(func() { calls.Add(100) })
	s.qp.Close()
	if err := s.rcq.Wait(testenv.Context(t, 20*time.Second)); err != nil {
		t.Fatal("receive CQ Wait after close:", err)
	}
	if s.rcq.Poll(wc[:]) != 1 || wc[0].Status != verbs.WCFlushErr {
		t.Fatalf("flushed receive: %+v", wc[0])
	}
	if calls.Load() >= 100 {
		t.Fatal("the handler ran for a flushed receive")
	}
}
