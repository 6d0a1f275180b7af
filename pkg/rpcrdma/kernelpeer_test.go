package rpcrdma

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// kernelPeer reads ../shared/kernel-peer's env file; skips (fails under
// CI=true) when the peer is not running.
func kernelPeer(t *testing.T) map[string]string {
	t.Helper()
	dir := os.Getenv("KERNEL_PEER_DIR")
	if dir == "" {
		dir = "/tmp/kernel-peer"
	}
	env := map[string]string{}
	if f, err := os.Open(filepath.Join(dir, "env")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				env[k] = v
			}
		}
		f.Close()
	}
	if pid := env["KP_PID"]; pid != "" {
		if _, err := os.Stat("/proc/" + pid); err != nil {
			env = map[string]string{}
		}
	}
	if env["KP_NFSRDMA_PORT"] == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("kernel peer not running (../shared/kernel-peer/start); required under CI")
		}
		t.Skip("kernel peer not running: start ../shared/kernel-peer/start to run the interop tests")
	}
	return env
}

func kpCheck(t *testing.T) {
	t.Helper()
	tools := os.Getenv("KERNEL_PEER_TOOLS")
	if tools == "" {
		tools = "../../../shared/kernel-peer"
	}
	if out, err := exec.Command(filepath.Join(tools, "check")).CombinedOutput(); err != nil {
		t.Fatalf("kernel peer check: %v\n%s", err, out)
	}
}

// TestKnfsdNullOverRDMA connects to Linux knfsd's NFS/RDMA listener over
// kernel siw with RFC 8797 private data, checks the inline sizes and
// credits knfsd grants, and makes NFSv3 NULL calls as RDMA_MSG Sends.
func TestKnfsdNullOverRDMA(t *testing.T) {
	env := kernelPeer(t)
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
		kpCheck(t)
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
	pdata, err := DefaultPrivateData().Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := d.Connect(ctx, env["KP_HOST"]+":"+env["KP_NFSRDMA_PORT"], qp,
		verbs.ConnParam{ResponderResources: 16, InitiatorDepth: 16, PrivateData: pdata})
	if err != nil {
		t.Fatal("connect to knfsd:", err)
	}
	peer, ok := ParsePrivateData(ci.PrivateData)
	t.Logf("connected: %s; knfsd private data %+v (present %v)", ci.Detail, peer, ok)
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
