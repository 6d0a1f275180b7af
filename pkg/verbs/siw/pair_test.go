package siw

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// end is one side of a connected loopback pair.
type end struct {
	dev  *Device
	pd   verbs.PD
	scq  verbs.CQ
	rcq  verbs.CQ
	qp   verbs.QP
	info verbs.ConnInfo
}

func newEnd(t testing.TB, cfg Config, attr verbs.QPAttr) *end {
	t.Helper()
	if cfg.RTRDelay == 0 {
		cfg.RTRDelay = -1
	}
	d := NewDevice(cfg)
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	scq, _ := d.CreateCQ(1024)
	rcq, _ := d.CreateCQ(1024)
	attr.SendCQ, attr.RecvCQ = scq, rcq
	qp, err := pd.CreateQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close(); scq.Close(); rcq.Close() })
	return &end{dev: d, pd: pd, scq: scq, rcq: rcq, qp: qp}
}

// pair connects a client (active) and a server (passive) over loopback.
// prepare runs on the server before it accepts (to post receives).
func pair(t testing.TB, ccfg, scfg Config, attr verbs.QPAttr, prepare func(s *end)) (c, s *end) {
	t.Helper()
	ctx := testenv.Context(t, 20*time.Second)
	c = newEnd(t, ccfg, attr)
	s = newEnd(t, scfg, attr)
	ln, err := s.dev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if prepare != nil {
		prepare(s)
	}
	errc := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			errc <- err
			return
		}
		s.info, err = req.Accept(ctx, s.qp, verbs.ConnParam{ResponderResources: 16, InitiatorDepth: 16, PrivateData: []byte("server")})
		errc <- err
	}()
	c.info, err = c.dev.Connect(ctx, ln.Addr().String(), c.qp, verbs.ConnParam{ResponderResources: 16, InitiatorDepth: 16, PrivateData: []byte("client")})
	if err != nil {
		t.Fatal("connect:", err)
	}
	if err := <-errc; err != nil {
		t.Fatal("accept:", err)
	}
	return c, s
}

// regMR registers a fresh buffer of n bytes.
func regMR(t testing.TB, e *end, n int, acc verbs.Access) verbs.MR {
	t.Helper()
	mr, err := e.pd.RegMR(make([]byte, n), acc)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

// waitWC waits for one completion on cq.
func waitWC(t testing.TB, cq verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for a completion: %v", err)
		}
	}
}

func wantOK(t testing.TB, wc verbs.WC, op verbs.WCOpcode) {
	t.Helper()
	if wc.Status != verbs.WCSuccess || wc.Opcode != op {
		t.Fatalf("completion %+v, want %v success", wc, op)
	}
}

// waitDone waits for e's QP to fail and returns its error.
func waitDone(t testing.TB, e *end) error {
	t.Helper()
	select {
	case <-e.qp.Done():
		return e.qp.Err()
	case <-time.After(10 * time.Second):
		t.Fatal("QP did not fail")
	}
	return nil
}

var allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite

func mustErrIs(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}

// notify sends a Send from a to b and waits for it on both sides. The
// receive completion orders everything b's stack placed before it (RDMAP
// ordering) before the caller's next access to b's memory, as a consumer
// of RDMA does after Writes.
func notify(t testing.TB, a, b *end) {
	t.Helper()
	nb := regMR(t, b, 16, verbs.AccessLocalWrite)
	if err := b.qp.PostRecv(&verbs.RecvWR{ID: 0xfeed, SGL: []verbs.SGE{nb.SGE(0, 16)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(&verbs.SendWR{ID: 0xfeed, Opcode: verbs.WRSend}); err != nil {
		t.Fatal(err)
	}
	wc := waitWC(t, b.rcq)
	if wc.ID != 0xfeed || wc.Status != verbs.WCSuccess {
		t.Fatalf("notify: %+v", wc)
	}
}

func castagnoliSum(b []byte) uint32 { return crc32Checksum(b) }

// negotiated is what ci says the MPA exchange chose, ULPDU aside (it
// depends on the path's MSS); the zero MPAInfo when ci has none.
func negotiated(ci verbs.ConnInfo) verbs.MPAInfo {
	if ci.MPA == nil {
		return verbs.MPAInfo{}
	}
	m := *ci.MPA
	m.ULPDU = 0
	return m
}
