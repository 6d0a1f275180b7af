package rpcrdma

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/kernelpeer"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// TestKnfsdNullOverRDMA connects to Linux knfsd's NFS/RDMA listener over
// kernel siw with RFC 8797 private data, checks the inline sizes and
// credits knfsd grants, and makes NFSv3 NULL calls as RDMA_MSG Sends.
func TestKnfsdNullOverRDMA(t *testing.T) {
	env := kernelpeer.Env(t, "KP_NFSRDMA_PORT")
	d := siw.NewDevice(siw.Config{})
	pd, _ := d.AllocPD()
	scq, _ := d.CreateCQ(64)
	rcq, _ := d.CreateCQ(64)
	qp, err := pd.CreateQP(verbs.QPAttr{SendCQ: scq, RecvCQ: rcq, MaxRecvWR: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		qp.Close()
		time.Sleep(300 * time.Millisecond)
		kernelpeer.Check(t)
	}()
	const inline = 4096
	rbuf, _ := pd.RegMR(make([]byte, 32*inline), verbs.AccessLocalWrite)
	for i := 0; i < 32; i++ {
		if err := qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rbuf.SGE(i*inline, inline)}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pdata, err := defaultPrivateData().Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := d.Connect(ctx, env["KP_HOST"]+":"+env["KP_NFSRDMA_PORT"], qp,
		verbs.ConnParam{ResponderResources: 16, InitiatorDepth: 16, PrivateData: pdata})
	if err != nil {
		t.Fatal("connect to knfsd:", err)
	}
	peer, ok := parsePrivateData(ci.PrivateData)
	t.Logf("connected: %s; knfsd private data %+v (present %v)", ci, peer, ok)
	if !ok || peer.SendSize != 4096 || peer.RecvSize != 4096 {
		t.Fatalf("knfsd's RFC 8797 private data: %+v present=%v, want 4096/4096", peer, ok)
	}
	sbuf, _ := pd.RegMR(make([]byte, inline), 0)
	var wc [1]verbs.WC
	wait := func(cq verbs.CQ) verbs.WC {
		for cq.Poll(wc[:]) == 0 {
			if err := cq.Wait(ctx); err != nil {
				t.Fatalf("waiting for a completion: %v (QP: %v)", err, qp.Err())
			}
		}
		return wc[0]
	}
	var rep Header
	for i := 0; i < 50; i++ {
		xid := uint32(0x1000 + i)
		h := Header{XID: xid, Vers: 1, Credits: 32, Proc: ProcMsg}
		b, err := h.Encode(sbuf.Bytes()[:0])
		if err != nil {
			t.Fatal(err)
		}
		e := xdr.NewEncoder(b[len(b):])                                   // the RPC message follows the transport header
		for _, v := range []uint32{xid, 0, 2, 100003, 3, 0, 0, 0, 0, 0} { // CALL, rpcvers 2, NFS v3 NULL, AUTH_NONE x2
			e.Uint32(v)
		}
		n := len(b) + e.Len()
		if err := qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{sbuf.SGE(0, n)}}); err != nil {
			t.Fatal(err)
		}
		r := wait(rcq)
		if r.Status != verbs.WCSuccess {
			t.Fatalf("receive: %+v", r)
		}
		msg := rbuf.Bytes()[int(r.ID)*inline : int(r.ID)*inline+int(r.ByteLen)]
		hl, err := rep.Decode(msg, nil)
		if err != nil {
			t.Fatalf("reply header: %v", err)
		}
		if rep.XID != xid || rep.Proc != ProcMsg || rep.Credits == 0 {
			t.Fatalf("reply header %+v", rep)
		}
		dec := xdr.NewDecoder(msg[hl:])
		rx, mtype, stat := dec.Uint32(), dec.Uint32(), dec.Uint32()
		dec.Uint32()
		dec.Opaque(400)
		accept := dec.Uint32()
		if dec.Err() != nil || rx != xid || mtype != 1 || stat != 0 || accept != 0 {
			t.Fatalf("RPC reply xid %x type %d stat %d accept %d err %v", rx, mtype, stat, accept, dec.Err())
		}
		if i == 0 {
			t.Logf("knfsd granted %d credits", rep.Credits)
		}
		qp.PostRecv(&verbs.RecvWR{ID: r.ID, SGL: []verbs.SGE{rbuf.SGE(int(r.ID)*inline, inline)}})
	}
}

// TestKnfsdNullViaRequester makes NFSv3 NULL calls (program 100003
// version 3 procedure 0) to Linux knfsd through our requester (Dial)
// under sunrpc.Client, and checks the inline thresholds and credits
// negotiated from knfsd's RFC 8797 private data and grants.
func TestKnfsdNullViaRequester(t *testing.T) {
	env := kernelpeer.Env(t, "KP_NFSRDMA_PORT")
	defer func() {
		time.Sleep(300 * time.Millisecond)
		kernelpeer.Check(t)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// knfsd's listen backlog is 1: one connection at a time.
	cli, err := Dial(ctx, siw.NewDevice(siw.Config{}), env["KP_HOST"]+":"+env["KP_NFSRDMA_PORT"], ClientOptions{Credits: 32})
	if err != nil {
		t.Fatal("connect to knfsd:", err)
	}
	defer cli.Close()
	peer, in := cli.Peer(), cli.Inline()
	t.Logf("connected: %s; knfsd private data %+v; inline %+v", cli.Info(), peer, in)
	if peer.SendSize != 4096 || peer.RecvSize != 4096 || in.Send != 4096 || in.Recv != 4096 {
		t.Fatalf("knfsd's RFC 8797 private data %+v, inline %+v: want 4096/4096", peer, in)
	}
	used := false
	rc, err := sunrpc.NewClient(func(context.Context) (sunrpc.ClientTransport, error) {
		if used {
			return nil, errors.New("no redial in this test")
		}
		used = true
		return cli, nil
	}, sunrpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				// Half the calls offer a Reply chunk (MaxReplySize 0: the
				// largest reply), which svcrdma always uses.
				if err := rc.Call(ctx, sunrpc.CallSpec{Prog: 100003, Vers: 3, Proc: 0, MaxReplySize: 256 * (g % 2)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	m := cli.Metrics()
	t.Logf("knfsd granted %d credits; window %d; metrics %+v", m.CreditsGranted, cli.Credits(), m)
	if m.Replies != 200 || m.ReplyChunks == 0 || m.CreditsGranted == 0 || cli.Credits() != min(32, int(m.CreditsGranted)) || m.CreditsInUse != 0 {
		t.Fatalf("metrics %+v, window %d", m, cli.Credits())
	}
}

// TestKnfsdVersionFallback: our requester opens with version 2 (the
// draft's section 4.3); Linux knfsd, which speaks version 1 only, answers
// ERR_VERS, and the connection continues in version 1: NFSv3 NULL calls
// complete on it. A second connection to the same address goes straight
// to version 1, without negotiating again.
func TestKnfsdVersionFallback(t *testing.T) {
	env := kernelpeer.Env(t, "KP_NFSRDMA_PORT")
	defer func() {
		time.Sleep(300 * time.Millisecond)
		kernelpeer.Check(t)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := env["KP_HOST"] + ":" + env["KP_NFSRDMA_PORT"]
	vc := &VersionCache{}
	cm := &ClientMetrics{}
	for i := range 2 {
		// knfsd's listen backlog is 1: one connection at a time.
		cli, err := Dial(ctx, siw.NewDevice(siw.Config{}), addr, ClientOptions{Credits: 32, Versions: vc, Metrics: cm})
		if err != nil {
			t.Fatal("connect to knfsd:", err)
		}
		m := cm.Metrics()
		t.Logf("connection %d: version %d, inline %+v, credits %d, metrics %+v", i+1, cli.Version(), cli.Inline(), cli.Credits(), m)
		if cli.Version() != 1 || m.Version != 1 || m.Version1Fallbacks != 1 || !vc.Version1Only(addr) {
			t.Fatalf("connection %d: version %d, fallbacks %d, remembered %v: want version 1 after one ERR_VERS",
				i+1, cli.Version(), m.Version1Fallbacks, vc.Version1Only(addr))
		}
		for j := range 10 {
			xid := uint32(0x5000 + 100*i + j)
			var e xdr.Encoder
			for _, v := range []uint32{xid, 0, 2, 100003, 3, 0, 0, 0, 0, 0} {
				e.Uint32(v)
			}
			r, err := cli.RoundTrip(ctx, &sunrpc.Call{XID: xid, Msg: sunrpc.Message{Head: e.Bytes()}, MaxReplySize: 256})
			if err != nil {
				t.Fatalf("NULL %d on connection %d: %v", j, i+1, err)
			}
			r.Release()
		}
		cli.Close()
		time.Sleep(200 * time.Millisecond) // knfsd tears the connection down
	}
}
