package lockd

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockcb"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// TestRelayToNodeService: with Options.NodeCallbacks, the GRANTED,
// GRANTED_MSG and SM_NOTIFY this server receives in the node's callback
// service's place reach the mount process they concern through the node
// service, GRANTED answered with the process's status; without a node
// service GRANTED fails with SYSTEM_ERR, so that its caller calls again;
// without NodeCallbacks GRANTED is PROC_UNAVAIL.
func TestRelayToNodeService(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "lockd.sock")
	svc := &lockcb.Service{Socket: sock, RPCBind: "127.0.0.1:1", Listen: "127.0.0.1:0"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	<-svc.Ready()
	calls := make(chan lockcb.Message, 8)
	a := lockcb.Attach(sock, "31337", func(m lockcb.Message) uint32 {
		calls <- m
		return uint32(nlm.Granted)
	})
	a.SetServers([]string{"server.example"})
	for deadline := time.Now().Add(5 * time.Second); len(svc.Attached()) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("mount process not attached")
		}
	}

	ls := startManager(t, Options{NodeCallbacks: sock})
	r := dial(t, ls.addr, "")
	args := &nlm.TestArgs{Cookie: []byte("c1"), Exclusive: true, Lock: lk("client", 5, "fh", 0, 1)}
	args.Lock.OH = []byte("5@client/31337")
	if st := r.nlm(t, nlm.ProcGranted, args); st != nlm.Granted {
		t.Errorf("relayed GRANTED = %v, want the mount's NLM4_GRANTED", st)
	}
	if m := <-calls; m.Proc != nlm.ProcGranted || m.Prog != nlm.Program {
		t.Errorf("mount got prog %d proc %d, want GRANTED", m.Prog, m.Proc)
	}
	if err := r.call(nlm.Program, nlm.Version, nlm.ProcGrantedMsg, args, nil); err != nil {
		t.Fatal("GRANTED_MSG:", err)
	}
	select {
	case m := <-calls:
		if m.Proc != nlm.ProcGrantedMsg {
			t.Errorf("mount got proc %d, want GRANTED_MSG", m.Proc)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("GRANTED_MSG not relayed")
	}
	if err := r.call(nsm.Program, nsm.Version, nsm.ProcNotify, &nsm.StatChge{MonName: "server.example", State: 5}, nil); err != nil {
		t.Fatal("SM_NOTIFY:", err)
	}
	select {
	case m := <-calls:
		var sc nsm.StatChge
		if m.Prog != nsm.Program || sc.Decode(xdr.NewDecoder(m.Args)) != nil || sc.MonName != "server.example" {
			t.Errorf("mount got %+v, want the SM_NOTIFY", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SM_NOTIFY not relayed")
	}

	// the node's service gone: the caller is to call again
	a.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := r.call(nlm.Program, nlm.Version, nlm.ProcGranted, args, &nlm.Res{}); !errors.Is(err, sunrpc.ErrSystemErr) {
		t.Errorf("GRANTED with no node service: %v, want SYSTEM_ERR", err)
	}

	plain := startManager(t, Options{})
	rp := dial(t, plain.addr, "")
	if err := rp.call(nlm.Program, nlm.Version, nlm.ProcGranted, args, &nlm.Res{}); !errors.Is(err, sunrpc.ErrProcUnavail) {
		t.Errorf("GRANTED without NodeCallbacks: %v, want PROC_UNAVAIL", err)
	}
}
