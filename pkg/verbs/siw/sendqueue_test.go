package siw

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// writesOf is how many batches of FPDUs e's QP has written.
func writesOf(e *end) uint64 {
	q := e.qp.(*qp)
	q.txMu.Lock()
	defer q.txMu.Unlock()
	return q.tx.fw.writes
}

// Sends queued with QueueSend stay in the send queue until PushSends,
// which writes the small ones together (one writev) and completes them in
// posting order; a large one among them is written when it is framed, with
// those before it; the receiver gets every message, whole and in order.
func TestQueueSendBatches(t *testing.T) {
	const n, size, large = 6, 200, 64 << 10
	var rbuf verbs.MR
	c, s := pair(t, Config{}, Config{}, verbs.QPAttr{}, func(s *end) {
		rbuf = regMR(t, s, (n+1)*large, verbs.AccessLocalWrite)
		for i := range n + 1 {
			if err := s.qp.PostRecv(&verbs.RecvWR{ID: uint64(100 + i), SGL: []verbs.SGE{rbuf.SGE(i*large, large)}}); err != nil {
				t.Fatal(err)
			}
		}
	})
	sq, ok := c.qp.(verbs.SendQueuer)
	if !ok {
		t.Fatal("siw QP is not a verbs.SendQueuer")
	}
	sbuf := regMR(t, c, (n+1)*large, 0)
	fill(sbuf.Bytes(), 3)
	lens := make([]int, n+1)
	post := func(from, to int) {
		for i := from; i < to; i++ {
			lens[i] = size + i
			if i == n {
				lens[i] = large // above maxBatched
			}
			wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{sbuf.SGE(i*large, lens[i])}}
			if err := sq.QueueSend(&wr); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := writesOf(c)
	post(0, n)
	time.Sleep(50 * time.Millisecond)
	var wc [1]verbs.WC
	if c.scq.Poll(wc[:]) != 0 || s.rcq.Poll(wc[:]) != 0 {
		t.Fatalf("a queued Send went out before PushSends: %+v", wc[0])
	}
	if w := writesOf(c); w != before {
		t.Fatalf("%d writes before PushSends", w-before)
	}
	sq.PushSends()
	if w := writesOf(c) - before; w != 1 {
		t.Fatalf("%d Sends of %d bytes went out in %d writes, want 1", n, size, w)
	}
	post(n, n+1)
	sq.PushSends()
	if w := writesOf(c) - before; w != 2 {
		t.Fatalf("a %d-byte Send went out in %d writes, want 1", large, w-1)
	}
	for i := range n + 1 {
		wc := waitWC(t, c.scq)
		wantOK(t, wc, verbs.WCSend)
		if wc.ID != uint64(i) {
			t.Fatalf("send completion %d has ID %d: out of posting order", i, wc.ID)
		}
	}
	for i := range n + 1 {
		wc := waitWC(t, s.rcq)
		wantOK(t, wc, verbs.WCRecv)
		if wc.ID != uint64(100+i) || int(wc.ByteLen) != lens[i] {
			t.Fatalf("receive %d: %+v, want ID %d, %d bytes", i, wc, 100+i, lens[i])
		}
		if !bytes.Equal(rbuf.Bytes()[i*large:][:lens[i]], sbuf.Bytes()[i*large:][:lens[i]]) {
			t.Fatalf("message %d differs", i)
		}
	}
}

// Goroutines queueing and pushing at once lose nothing: a PushSends that
// finds another transmitting leaves its Send to that one, which takes it
// before it stops; every Send completes and arrives once.
func TestPushSendsConcurrent(t *testing.T) {
	const senders, each = 8, 100 // completions within the CQs (newEnd: 1024)
	const total = senders * each
	var rbuf verbs.MR
	attr := verbs.QPAttr{MaxSendWR: total, MaxRecvWR: total}
	c, s := pair(t, Config{}, Config{}, attr, func(s *end) {
		rbuf = regMR(t, s, total*8, verbs.AccessLocalWrite)
		for i := range total {
			if err := s.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rbuf.SGE(i*8, 8)}}); err != nil {
				t.Fatal(err)
			}
		}
	})
	sq := c.qp.(verbs.SendQueuer)
	sbuf := regMR(t, c, total*8, 0)
	var mu sync.Mutex // orders QueueSend as a consumer's lock does
	var wg sync.WaitGroup
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				i := g*each + k
				b := sbuf.Bytes()[i*8:][:8]
				b[0], b[1] = byte(g), byte(k)
				wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{sbuf.SGE(i*8, 8)}}
				mu.Lock()
				err := sq.QueueSend(&wr)
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				sq.PushSends()
			}
		}()
	}
	wg.Wait()
	seen := map[[2]byte]bool{}
	for range total {
		wantOK(t, waitWC(t, c.scq), verbs.WCSend)
		wc := waitWC(t, s.rcq)
		wantOK(t, wc, verbs.WCRecv)
		b := rbuf.Bytes()[wc.ID*8:][:2]
		k := [2]byte{b[0], b[1]}
		if seen[k] {
			t.Fatalf("sender %d's Send %d arrived twice", k[0], k[1])
		}
		seen[k] = true
	}
	if len(seen) != total {
		t.Fatalf("%d Sends arrived, want %d", len(seen), total)
	}
	t.Logf("%d Sends in %d writes", total, writesOf(c))
}

// A Send queued when the connection fails completes flushed, not
// successful, and PushSends returns.
func TestQueueSendFlushedOnFailure(t *testing.T) {
	c, _ := pair(t, Config{}, Config{}, verbs.QPAttr{}, nil)
	sbuf := regMR(t, c, 64, 0)
	sq := c.qp.(verbs.SendQueuer)
	wr := verbs.SendWR{ID: 5, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{sbuf.SGE(0, 64)}}
	if err := sq.QueueSend(&wr); err != nil {
		t.Fatal(err)
	}
	c.qp.(*qp).fail(verbs.ErrDisconnect)
	sq.PushSends()
	wc := waitWC(t, c.scq)
	if wc.ID != 5 || wc.Status != verbs.WCFlushErr {
		t.Fatalf("completion %+v, want ID 5 flushed", wc)
	}
	if err := sq.QueueSend(&wr); err == nil {
		t.Fatal("QueueSend on a failed QP succeeded")
	}
}

// Senders that queue their next Send as soon as the peer has received
// their last one (as RPC callers whose replies come back) can keep a
// transmitting goroutine's drain busy for a long time: the slots of the
// Sends it has written must be freed as it goes, or the send queue fills
// (ErrQueueFull) though every Send is long out.
func TestPushSendsLongDrain(t *testing.T) {
	const senders, rounds, size = 128, 60, 64
	attr := verbs.QPAttr{MaxSendWR: senders + batchFPDUs, MaxRecvWR: senders}
	var rbuf verbs.MR
	c, s := pair(t, Config{}, Config{}, attr, func(s *end) {
		rbuf = regMR(t, s, senders*size, verbs.AccessLocalWrite)
		for i := range senders {
			if err := s.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rbuf.SGE(i*size, size)}}); err != nil {
				t.Fatal(err)
			}
		}
	})
	sq := c.qp.(verbs.SendQueuer)
	sbuf := regMR(t, c, senders*size, 0)
	got := make([]chan struct{}, senders) // the peer received sender i's Send
	for i := range got {
		got[i] = make(chan struct{}, 1)
	}
	ctx := testenv.Context(t, 30*time.Second)
	go func() { // the peer: take each Send, repost its receive, tell its sender
		var wcs [16]verbs.WC
		for {
			n := s.rcq.Poll(wcs[:])
			if n == 0 {
				if s.rcq.Wait(ctx) != nil {
					return
				}
				continue
			}
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.WCSuccess {
					return
				}
				i := int(rbuf.Bytes()[int(wc.ID)*size])
				if err := s.qp.PostRecv(&verbs.RecvWR{ID: wc.ID, SGL: []verbs.SGE{rbuf.SGE(int(wc.ID)*size, size)}}); err != nil {
					return
				}
				got[i] <- struct{}{}
			}
		}
	}()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := sbuf.Bytes()[i*size:][:size]
			b[0] = byte(i)
			for r := range rounds {
				wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{sbuf.SGE(i*size, size)}} // unsignaled, as RPC calls
				mu.Lock()
				err := sq.QueueSend(&wr)
				mu.Unlock()
				if err != nil {
					t.Errorf("sender %d, round %d: %v", i, r, err)
					return
				}
				sq.PushSends()
				select {
				case <-got[i]:
				case <-ctx.Done():
					t.Errorf("sender %d, round %d: not received", i, r)
					return
				}
			}
		}()
	}
	wg.Wait()
}
