package siw

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// FuzzMPAFrame decodes arbitrary MPA request and reply frames: a clean
// error or a frame whose re-encoding decodes to the same values.
func FuzzMPAFrame(f *testing.F) {
	for _, fr := range []mpaFrame{
		{rev: 2, enhanced: true, crc: true, p2p: true, rtrWrite: true, ird: 16, ord: 16, priv: []byte{0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3}},
		{rev: 1, crc: true},
		{reply: true, rev: 2, enhanced: true, reject: true},
	} {
		b, _ := fr.encode(nil)
		f.Add(b, fr.reply)
	}
	f.Add([]byte("MPA ID Req Frame\x10\x02\xff\xff"), false)
	f.Fuzz(func(t *testing.T, b []byte, reply bool) {
		var fr mpaFrame
		if err := readMPAFrame(bytes.NewReader(b), reply, &fr); err != nil {
			return
		}
		enc, err := fr.encode(nil)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var again mpaFrame
		if err := readMPAFrame(bytes.NewReader(enc), reply, &again); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if again.rev != fr.rev || again.ird != fr.ird || again.ord != fr.ord || !bytes.Equal(again.priv, fr.priv) ||
			again.crc != fr.crc || again.markers != fr.markers || again.p2p != fr.p2p {
			t.Fatalf("round trip changed %+v into %+v", fr, again)
		}
	})
}

// FuzzTerminateCtrl decodes arbitrary Terminate control words.
func FuzzTerminateCtrl(f *testing.F) {
	f.Add([]byte{0x02, 0x02, 0, 0})
	f.Add([]byte{0x20, 0x02, 0xc0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 4 {
			return
		}
		tc := parseTermCtrl(b)
		_ = terminateName(tc.layer, tc.etype, tc.code)
	})
}

// fuzzServer is our passive side, shared by the iterations of
// FuzzFPDUStream: one device, a target region between guard bytes.
type fuzzServer struct {
	dev   *Device
	pd    verbs.PD
	ln    verbs.Listener
	whole []byte
	mr    verbs.MR // STag 0x101: index 1, key 1
	rbuf  verbs.MR // STag 0x201
}

const fuzzGuard = 64

func newFuzzServer(f *testing.F, cfg Config) *fuzzServer {
	fs := &fuzzServer{dev: NewDevice(cfg)}
	fs.pd, _ = fs.dev.AllocPD()
	fs.whole = make([]byte, fuzzGuard+4096+fuzzGuard)
	fs.mr, _ = fs.pd.RegMR(fs.whole[fuzzGuard:fuzzGuard+4096], allAccess)
	fs.rbuf, _ = fs.pd.RegMR(make([]byte, 1024), verbs.AccessLocalWrite)
	var err error
	fs.ln, err = fs.dev.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { fs.ln.Close() })
	return fs
}

// FuzzFPDUStream feeds arbitrary bytes, after a correct MPA handshake and
// RTR, to the real receive path of a connected QP over TCP. Whatever
// arrives, the QP ends in a clean error or keeps running; nothing panics,
// hangs, or touches memory outside the registered region.
func FuzzFPDUStream(f *testing.F) { fuzzStream(f, Config{NoCRC: true}) }

// FuzzFPDUStreamMarkers is FuzzFPDUStream with MPA markers required by our
// side: the input is read with markers stripped at every 512th octet.
func FuzzFPDUStreamMarkers(f *testing.F) { fuzzStream(f, Config{NoCRC: true, Markers: true}) }

func fuzzStream(f *testing.F, cfg Config) {
	fsrv := newFuzzServer(f, cfg)
	p := &rawPeer{}
	seed := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	rr := func(size uint32) []byte {
		var b [readReqLen]byte
		(&readReq{sinkSTag: 0x999, size: size, srcSTag: 0x101, srcTO: 1 << 40}).put(b[:])
		return b[:]
	}
	f.Add(seed(p.untagged(opSend, true, 0, qnSend, 1, 0, []byte("hello"))))
	f.Add(seed(p.untagged(opSend, false, 0, qnSend, 1, 0, []byte("hel")), p.untagged(opSend, true, 0, qnSend, 1, 3, []byte("lo"))))
	f.Add(seed(p.tagged(opRDMAWrite, true, 0x101, 1<<40+100, []byte("data"))))
	f.Add(seed(p.untagged(opReadRequest, true, 0, qnReadReq, 1, 0, rr(64))))
	f.Add(seed(p.untagged(opSendInv, true, 0x101, qnSend, 1, 0, nil)))
	f.Add(seed(p.untagged(opTerminate, true, 0, qnTerminate, 1, 0, []byte{0x02, 0x02, 0, 0})))
	f.Add(bytes.Repeat(p.tagged(opRDMAWrite, true, 0x101, 1<<40, make([]byte, 100)), 8))
	f.Add([]byte{0x00, 0x03, 0x41, 0x43, 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		fs := fsrv
		scq, _ := fs.dev.CreateCQ(64)
		rcq, _ := fs.dev.CreateCQ(64)
		qp, _ := fs.pd.CreateQP(verbs.QPAttr{SendCQ: scq, RecvCQ: rcq, MaxRecvWR: 8})
		defer func() { qp.Close(); scq.Close(); rcq.Close() }()
		for i := 0; i < 4; i++ {
			_ = qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{fs.rbuf.SGE(i*256, 256)}})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			req, err := fs.ln.Accept(ctx)
			if err == nil {
				_, err = req.Accept(ctx, qp, verbs.ConnParam{ResponderResources: 4, InitiatorDepth: 4})
			}
			done <- err
		}()
		c, err := net.Dial("tcp", fs.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		req := mpaFrame{rev: 2, enhanced: true, p2p: true, rtrWrite: true, ird: 4, ord: 4}
		b, _ := req.encode(nil)
		c.Write(b)
		var rep mpaFrame
		if err := readMPAFrame(c, true, &rep); err != nil {
			t.Fatal(err)
		}
		rtr := (&rawPeer{}).tagged(opRDMAWrite, true, 1, 0, nil)
		if rep.markers { // the stream we send starts with a marker
			rtr = append(make([]byte, mpaMarkerLen), rtr...)
		}
		c.Write(rtr)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		go func() { // read whatever we answer, so our writes never block
			var sink [4096]byte
			for {
				if _, err := c.Read(sink[:]); err != nil {
					return
				}
			}
		}()
		c.Write(in)
		c.(*net.TCPConn).CloseWrite()
		select {
		case <-qp.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("receive path hung on the input")
		}
		for i := 0; i < fuzzGuard; i++ {
			if fs.whole[i] != 0 || fs.whole[len(fs.whole)-1-i] != 0 {
				t.Fatal("bytes placed outside the registered region")
			}
		}
	})
}
