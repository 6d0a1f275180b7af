package siw

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/kernelpeer"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// TestKernelRping speaks the rping protocol (rdma-core's rping, client side)
// to the kernel's rping server over Linux siw: the kernel RDMA Reads our
// start buffer, RDMA Writes it back into our sink buffer, and Sends to us.
// Every byte is checked, with CRC on and off.
func TestKernelRping(t *testing.T) {
	env := kernelpeer.Env(t, "KP_RPING_PORT")
	addr := env["KP_HOST"] + ":" + env["KP_RPING_PORT"]
	for _, tc := range []struct {
		name string
		cfg  Config
		want verbs.MPAInfo // ULPDU not compared
	}{
		{"crc", Config{}, verbs.MPAInfo{Revision: 2, CRC: true, RTR: verbs.RTRWrite}},
		{"nocrc", Config{NoCRC: true}, verbs.MPAInfo{Revision: 2, RTR: verbs.RTRWrite}},
		{"read RTR", Config{ReadRTR: true}, verbs.MPAInfo{Revision: 2, CRC: true, RTR: verbs.RTRRead}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rping(t, addr, tc.cfg, tc.want, 20)
			kernelpeer.Check(t)
		})
	}
}

func rping(t *testing.T, addr string, cfg Config, want verbs.MPAInfo, count int) {
	const size = 64 // the server's buffer (rping -S default)
	d := NewDevice(cfg)
	pd, _ := d.AllocPD()
	scq, _ := d.CreateCQ(64)
	rcq, _ := d.CreateCQ(64)
	e := &end{dev: d, pd: pd, scq: scq, rcq: rcq}
	start := regMR(t, e, size, verbs.AccessRemoteRead)
	sink := regMR(t, e, size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	info := regMR(t, e, 16, 0)
	recv := regMR(t, e, 16, verbs.AccessLocalWrite)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// the rping server serves one client and restarts: retry the connect
	var qp verbs.QP
	var ci verbs.ConnInfo
	for attempt := 0; ; attempt++ {
		var err error
		qp, err = pd.CreateQP(verbs.QPAttr{SendCQ: scq, RecvCQ: rcq, MaxSendWR: 8, MaxRecvWR: 8})
		if err != nil {
			t.Fatal(err)
		}
		if err = qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{recv.SGE(0, 16)}}); err != nil {
			t.Fatal(err)
		}
		ci, err = d.Connect(ctx, addr, qp, verbs.ConnParam{ResponderResources: 1, InitiatorDepth: 1})
		if err == nil {
			break
		}
		qp.Close()
		for scq.Poll(make([]verbs.WC, 8)) > 0 || rcq.Poll(make([]verbs.WC, 8)) > 0 {
		}
		if attempt == 10 {
			t.Fatalf("connect to the rping server at %s: %v", addr, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	defer func() {
		qp.Close()
		time.Sleep(300 * time.Millisecond) // let siw tear down before the next client
	}()
	t.Logf("connected: %s", ci)
	if got := negotiated(ci); got != want {
		t.Fatalf("negotiated %+v, want %+v", got, want)
	}
	advertise := func(mr verbs.MR) {
		b := info.Bytes()
		binary.BigEndian.PutUint64(b[0:], mr.Addr())
		binary.BigEndian.PutUint32(b[8:], mr.RKey())
		binary.BigEndian.PutUint32(b[12:], size)
		if err := qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{info.SGE(0, 16)}}); err != nil {
			t.Fatal(err)
		}
		wantOK(t, waitWC(t, scq), verbs.WCSend)
	}
	awaitServer := func(what string) {
		wc := waitWC(t, rcq)
		if wc.Status != verbs.WCSuccess || wc.ByteLen != 16 {
			t.Fatalf("%s: server's Send completed %+v (QP error: %v)", what, wc, qp.Err())
		}
		if err := qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{recv.SGE(0, 16)}}); err != nil {
			t.Fatal(err)
		}
	}
	for ping := 0; ping < count; ping++ {
		msg := start.Bytes()
		n := copy(msg, "rdma-ping-"+string(rune('0'+ping%10))+": ")
		for i, c := n, byte(65+ping%58); i < size; i++ {
			msg[i] = c
			if c++; c > 122 {
				c = 65
			}
		}
		msg[size-1] = 0
		clear(sink.Bytes())
		advertise(start) // the server RDMA Reads our start buffer...
		awaitServer("after the server's RDMA Read")
		advertise(sink) // ...and RDMA Writes it into our sink buffer
		awaitServer("after the server's RDMA Write")
		if !bytes.Equal(sink.Bytes(), start.Bytes()) {
			t.Fatalf("ping %d: sink %q != start %q", ping, sink.Bytes(), start.Bytes())
		}
	}
}
