package siw

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func TestHandshakeNegotiates(t *testing.T) {
	c, s := pair(t, Config{}, Config{}, verbs.QPAttr{}, nil)
	if string(c.info.PrivateData) != "server" || string(s.info.PrivateData) != "client" {
		t.Fatalf("private data: client got %q, server got %q", c.info.PrivateData, s.info.PrivateData)
	}
	if c.info.IRD != 16 || c.info.ORD != 16 || s.info.IRD != 16 || s.info.ORD != 16 {
		t.Fatalf("IRD/ORD: client %d/%d server %d/%d", c.info.IRD, c.info.ORD, s.info.IRD, s.info.ORD)
	}
	if c.qp.State() != verbs.QPRTS || s.qp.State() != verbs.QPRTS {
		t.Fatalf("states %v %v", c.qp.State(), s.qp.State())
	}
}

func TestSendRecv(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		size int
	}{
		{"small", Config{}, 64},
		{"zero", Config{}, 0},
		{"many FPDUs", Config{MaxULPDU: 128}, 100_000},
		{"1MiB", Config{}, 1 << 20},
		{"no CRC", Config{NoCRC: true}, 70_000},
		{"markers", Config{Markers: true, MaxULPDU: 1000}, 70_001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rbuf verbs.MR
			c, s := pair(t, tc.cfg, tc.cfg, verbs.QPAttr{}, func(s *end) {
				rbuf = regMR(t, s, tc.size+100, verbs.AccessLocalWrite)
				// two SGEs: the message is scattered across both
				half := (tc.size + 100) / 2
				if err := s.qp.PostRecv(&verbs.RecvWR{ID: 7, SGL: []verbs.SGE{rbuf.SGE(0, half), rbuf.SGE(half, tc.size+100-half)}}); err != nil {
					t.Fatal(err)
				}
			})
			sbuf := regMR(t, c, tc.size+1, 0)
			fill(sbuf.Bytes(), 1)
			sgl := []verbs.SGE{}
			if tc.size > 0 {
				sgl = []verbs.SGE{sbuf.SGE(0, tc.size/3), sbuf.SGE(tc.size/3, tc.size-tc.size/3)}
			}
			if err := c.qp.PostSend(&verbs.SendWR{ID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sgl}); err != nil {
				t.Fatal(err)
			}
			wc := waitWC(t, c.scq)
			wantOK(t, wc, verbs.WCSend)
			if wc.ID != 9 {
				t.Fatalf("send wc id %d", wc.ID)
			}
			wc = waitWC(t, s.rcq)
			wantOK(t, wc, verbs.WCRecv)
			if wc.ID != 7 || int(wc.ByteLen) != tc.size {
				t.Fatalf("recv wc %+v, want id 7 len %d", wc, tc.size)
			}
			if !bytes.Equal(rbuf.Bytes()[:tc.size], sbuf.Bytes()[:tc.size]) {
				t.Fatal("received bytes differ")
			}
		})
	}
}

func TestWriteRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		size int
	}{
		{"small", Config{}, 100},
		{"1MiB", Config{}, 1 << 20},
		{"small FPDUs", Config{MaxULPDU: 200}, 50_003},
		{"no CRC", Config{NoCRC: true}, 300_000},
		{"markers", Config{Markers: true}, 300_001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := pair(t, tc.cfg, tc.cfg, verbs.QPAttr{}, nil)
			remote := regMR(t, s, tc.size+64, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
			local := regMR(t, c, tc.size, verbs.AccessLocalWrite)
			fill(local.Bytes(), 2)
			// RDMA Write at offset 64 of the remote region
			if err := c.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{local.SGE(0, tc.size)}, RKey: remote.RKey(), RemoteAddr: remote.Addr() + 64}); err != nil {
				t.Fatal(err)
			}
			wantOK(t, waitWC(t, c.scq), verbs.WCRDMAWrite)
			// an RDMA Read after the Write sees its data (RDMAP ordering)
			back := regMR(t, c, tc.size, verbs.AccessLocalWrite)
			if err := c.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{back.SGE(0, tc.size)}, RKey: remote.RKey(), RemoteAddr: remote.Addr() + 64}); err != nil {
				t.Fatal(err)
			}
			wc := waitWC(t, c.scq)
			wantOK(t, wc, verbs.WCRDMARead)
			if int(wc.ByteLen) != tc.size {
				t.Fatalf("read %d bytes", wc.ByteLen)
			}
			notify(t, c, s)
			if !bytes.Equal(remote.Bytes()[64:], local.Bytes()) {
				t.Fatal("remote memory differs from what was written")
			}
			if !bytes.Equal(back.Bytes(), local.Bytes()) {
				t.Fatal("read back differs")
			}
			if !bytes.Equal(remote.Bytes()[:64], make([]byte, 64)) {
				t.Fatal("write placed bytes before its tagged offset")
			}
		})
	}
}

// TestNegotiation covers the MPA setup variants: revision 1 requests, the
// Read RTR, CRC on when only one end wants it, markers in one direction,
// and zero-length RDMA Write and Read after each.
func TestNegotiation(t *testing.T) {
	w2 := verbs.MPAInfo{Revision: 2, CRC: true, RTR: verbs.RTRWrite}
	with := func(f func(*verbs.MPAInfo)) verbs.MPAInfo { m := w2; f(&m); return m }
	for _, tc := range []struct {
		name  string
		c, s  Config
		cWant verbs.MPAInfo // ULPDU not compared
		sWant verbs.MPAInfo // the server's view, when it differs
	}{
		{"rev1", Config{Revision1: true}, Config{}, verbs.MPAInfo{Revision: 1, CRC: true}, verbs.MPAInfo{}},
		{"read RTR", Config{ReadRTR: true}, Config{}, with(func(m *verbs.MPAInfo) { m.RTR = verbs.RTRRead }), verbs.MPAInfo{}},
		{"write RTR", Config{}, Config{}, w2, verbs.MPAInfo{}},
		{"no P2P", Config{NoP2P: true}, Config{}, with(func(m *verbs.MPAInfo) { m.RTR = verbs.RTRNone }), verbs.MPAInfo{}},
		{"CRC wanted by the server only", Config{NoCRC: true}, Config{}, w2, verbs.MPAInfo{}},
		{"CRC wanted by the client only", Config{}, Config{NoCRC: true}, w2, verbs.MPAInfo{}},
		{"CRC off by both", Config{NoCRC: true}, Config{NoCRC: true}, with(func(m *verbs.MPAInfo) { m.CRC = false }), verbs.MPAInfo{}},
		{"markers toward the client", Config{Markers: true}, Config{}, with(func(m *verbs.MPAInfo) { m.MarkersRx = true }), with(func(m *verbs.MPAInfo) { m.MarkersTx = true })},
		{"markers toward the server", Config{}, Config{Markers: true}, with(func(m *verbs.MPAInfo) { m.MarkersTx = true }), with(func(m *verbs.MPAInfo) { m.MarkersRx = true })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rb verbs.MR
			c, s := pair(t, tc.c, tc.s, verbs.QPAttr{}, func(s *end) {
				rb = regMR(t, s, 70000, verbs.AccessLocalWrite)
				s.qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rb.SGE(0, 70000)}})
			})
			sWant := tc.sWant
			if sWant == (verbs.MPAInfo{}) {
				sWant = tc.cWant
			}
			if got := negotiated(c.info); got != tc.cWant {
				t.Fatalf("client negotiated %+v, want %+v", got, tc.cWant)
			}
			if got := negotiated(s.info); got != sWant {
				t.Fatalf("server negotiated %+v, want %+v", got, sWant)
			}
			if c.info.MPA.ULPDU <= 0 || s.info.MPA.ULPDU <= 0 {
				t.Fatalf("ULPDU %d / %d", c.info.MPA.ULPDU, s.info.MPA.ULPDU)
			}
			remote := regMR(t, s, 70000, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
			local := regMR(t, c, 70000, verbs.AccessLocalWrite)
			fill(local.Bytes(), 5)
			// zero-length Write and Read, then real ones, then a Send both ways
			for _, wr := range []verbs.SendWR{
				{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, RKey: 0x77, RemoteAddr: 5},
				{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, RKey: 0x77},
				{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{local.SGE(0, 70000)}, RKey: remote.RKey(), RemoteAddr: remote.Addr()},
				{ID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{local.SGE(0, 70000)}},
			} {
				if err := c.qp.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
				wc := waitWC(t, c.scq)
				if wc.Status != verbs.WCSuccess || wc.ID != wr.ID {
					t.Fatalf("%v: %+v (QP err %v)", wr.Opcode, wc, c.qp.Err())
				}
			}
			wantOK(t, waitWC(t, s.rcq), verbs.WCRecv)
			if !bytes.Equal(remote.Bytes(), local.Bytes()) || !bytes.Equal(rb.Bytes(), local.Bytes()) {
				t.Fatal("data differs")
			}
		})
	}
}
