package siw

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// TestRandomOperations posts thousands of random RDMA Writes, RDMA Reads and
// Sends, many outstanding at once, over connections with random FPDU sizes,
// CRC and markers, and checks every result against a model of the peer's
// memory: a Read returns what the Writes posted before it left there
// (RDMAP ordering), a Send arrives intact in the next receive.
func TestRandomOperations(t *testing.T) {
	ops := 3000
	if testing.Short() {
		ops = 300
	}
	for seed := uint64(1); seed <= 3; seed++ {
		r := rand.New(rand.NewPCG(seed, 42))
		cfg := Config{MaxULPDU: 128 + r.IntN(8000), NoCRC: r.IntN(2) == 0, Markers: seed == 2}
		t.Run(fmt.Sprintf("seed%d ulpdu%d crc%v markers%v", seed, cfg.MaxULPDU, !cfg.NoCRC, cfg.Markers), func(t *testing.T) {
			randomOps(t, r, cfg, ops)
		})
	}
}

func randomOps(t *testing.T, r *rand.Rand, cfg Config, ops int) {
	const (
		region  = 256 << 10
		maxLen  = 48 << 10
		depth   = 16
		recvLen = 8 << 10
	)
	attr := verbs.QPAttr{MaxSendWR: 64, MaxRecvWR: 64}
	var rbuf verbs.MR
	c, s := pair(t, cfg, cfg, attr, func(s *end) {
		rbuf = regMR(t, s, 64*recvLen, verbs.AccessLocalWrite)
		for i := 0; i < 64; i++ {
			s.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rbuf.SGE(i*recvLen, recvLen)}})
		}
	})
	target := regMR(t, s, region, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	model := make([]byte, region)
	src := regMR(t, c, region, 0)
	fill(src.Bytes(), r.Uint64())
	sinks := regMR(t, c, depth*maxLen, verbs.AccessLocalWrite)

	type pending struct {
		op     verbs.WROpcode
		want   []byte // for Reads: the model's bytes at post time
		off    int    // for Reads: offset in the target
		sink   int
		sendAt int // for Sends: source offset
		n      int
	}
	inflight := map[uint64]*pending{}
	freeSinks := make([]int, depth)
	for i := range freeSinks {
		freeSinks[i] = i
	}
	var sends []*pending // in order: Sends arrive in posting order
	var wcs [16]verbs.WC
	nextRecv := 0
	checkRecv := func() {
		for {
			n := s.rcq.Poll(wcs[:])
			if n == 0 {
				return
			}
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.WCSuccess || len(sends) == 0 {
					t.Fatalf("receive completion %+v (sends outstanding %d, QP err %v)", wc, len(sends), s.qp.Err())
				}
				p := sends[0]
				sends = sends[1:]
				slot := int(wc.ID)
				if slot != nextRecv%64 || int(wc.ByteLen) != p.n {
					t.Fatalf("receive %d of %d bytes, want slot %d and %d bytes", slot, wc.ByteLen, nextRecv%64, p.n)
				}
				got := rbuf.Bytes()[slot*recvLen : slot*recvLen+p.n]
				if !bytes.Equal(got, src.Bytes()[p.sendAt:p.sendAt+p.n]) {
					t.Fatalf("Send %d: payload differs", nextRecv)
				}
				nextRecv++
				s.qp.PostRecv(&verbs.RecvWR{ID: uint64(slot), SGL: []verbs.SGE{rbuf.SGE(slot*recvLen, recvLen)}})
			}
		}
	}
	reap := func(block bool) {
		for {
			n := c.scq.Poll(wcs[:])
			if n == 0 {
				if !block {
					return
				}
				wcs[0] = waitWC(t, c.scq)
				n = 1
			}
			for _, wc := range wcs[:n] {
				p := inflight[wc.ID]
				if wc.Status != verbs.WCSuccess || p == nil {
					t.Fatalf("completion %+v (QP err %v)", wc, c.qp.Err())
				}
				delete(inflight, wc.ID)
				if p.op == verbs.WRRDMARead {
					got := sinks.Bytes()[p.sink*maxLen : p.sink*maxLen+p.n]
					if !bytes.Equal(got, p.want) {
						t.Fatalf("RDMA Read %d: data differs from the model", wc.ID)
					}
					freeSinks = append(freeSinks, p.sink)
				}
			}
			block = false
		}
	}
	for id := uint64(1); id <= uint64(ops); id++ {
		for len(inflight) >= depth || len(freeSinks) == 0 || len(sends) >= 48 {
			checkRecv()
			reap(len(sends) < 48)
		}
		n := r.IntN(maxLen + 1)
		if r.IntN(10) == 0 {
			n = 0
		}
		off := r.IntN(region - n + 1)
		soff := r.IntN(region - n + 1)
		wr := verbs.SendWR{ID: id, Flags: verbs.SendSignaled}
		p := &pending{n: n}
		switch k := r.IntN(10); {
		case k < 4:
			wr.Opcode, wr.RKey, wr.RemoteAddr = verbs.WRRDMAWrite, target.RKey(), target.Addr()+uint64(off)
			wr.SGL = []verbs.SGE{src.SGE(soff, n/2), src.SGE(soff+n/2, n-n/2)}
			// a Write may overtake an earlier Read at the responder unless
			// fenced (verbs Fence: wait for prior Reads)
			for _, q := range inflight {
				if q.op == verbs.WRRDMARead && q.off < off+n && off < q.off+q.n {
					wr.Flags |= verbs.SendFence
				}
			}
			copy(model[off:off+n], src.Bytes()[soff:soff+n])
		case k < 8:
			p.sink = freeSinks[len(freeSinks)-1]
			freeSinks = freeSinks[:len(freeSinks)-1]
			p.want = append([]byte(nil), model[off:off+n]...)
			p.off = off
			wr.Opcode, wr.RKey, wr.RemoteAddr = verbs.WRRDMARead, target.RKey(), target.Addr()+uint64(off)
			wr.SGL = []verbs.SGE{sinks.SGE(p.sink*maxLen, n)}
		default:
			n = min(n, recvLen)
			p.n, p.sendAt = n, soff
			wr.Opcode = verbs.WRSend
			wr.SGL = []verbs.SGE{src.SGE(soff, n)}
			sends = append(sends, p)
		}
		p.op = wr.Opcode
		inflight[id] = p
		if err := c.qp.PostSend(&wr); err != nil {
			t.Fatalf("post %d: %v", id, err)
		}
	}
	for len(inflight) > 0 {
		reap(true)
	}
	// a last Send: its arrival orders every Write before it
	sends = append(sends, &pending{op: verbs.WRSend})
	if err := c.qp.PostSend(&verbs.SendWR{ID: 0, Opcode: verbs.WRSend}); err != nil {
		t.Fatal(err)
	}
	for len(sends) > 0 {
		checkRecv()
		if len(sends) > 0 {
			if err := s.rcq.Wait(testenv.Context(t, 20*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !bytes.Equal(target.Bytes(), model) {
		t.Fatal("target memory differs from the model")
	}
}
