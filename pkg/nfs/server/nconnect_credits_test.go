package server

import (
	"fmt"
	"sync"
	"testing"
	"time"

	client "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// podCredits sums, over the server's RDMA connections of machine, the
// grants and the receives held for calls (posted or in process).
func podCredits(e *volEnv, machine string) (conns, grant, held int, drained bool) {
	drained = true
	for _, ci := range e.srv.RDMAConnections() {
		if ci.Machine != machine {
			continue
		}
		conns++
		grant += ci.Grant
		held += ci.Posted + ci.InProcess
		drained = drained && ci.Posted+ci.InProcess <= ci.Grant
	}
	return
}

// A pod mounting with nconnect=4 keeps one credit grant: its four
// RPC-over-RDMA connections, each asking 32 credits, are granted a
// quarter of the pod's grant each (at least 1), and during concurrent I/O
// the grants of the four, and once each connection has drained the
// receives it posted before the others joined, the receives they hold,
// never add up to more than the pod's grant.
func TestNConnectSharesPodGrant(t *testing.T) {
	for _, tc := range []struct{ grant, each int }{{8, 2}, {10, 2}, {2, 1}} {
		t.Run(fmt.Sprint("grant", tc.grant), func(t *testing.T) { nconnectGrant(t, tc.grant, tc.each) })
	}
}

func nconnectGrant(t *testing.T, podGrant, each int) {
	e := startVolEnv(t, t.TempDir(), t.TempDir(), true, Export{Path: "/"})
	ctx := ctxLong(t)
	const machine = "node1/default/pod-n"
	if err := e.adm.SetCredits(ctx, map[string]int{machine: podGrant}); err != nil {
		t.Fatal(err)
	}
	c, err := client.Mount(ctx, client.Options{
		Server: "127.0.0.1", NFSPort: e.nfsPort, MountPort: e.mntPort, Export: "/",
		AuthSys: sunrpc.AuthSysParams{MachineName: machine}, NConnect: 4, Transport: "rdma",
		Dial: rpcrdma.Dialer(siw.NewDevice(siw.Config{RTRDelay: -1}), e.rdmaAddr, rpcrdma.ClientOptions{Credits: 32}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fh, _, err := c.CreateFile(ctx, c.Root(), "f", 0o644, false)
	if err != nil {
		t.Fatal(err)
	}
	// Warm up: every connection named and drained to its share.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := c.Getattr(ctx, fh); err != nil {
			t.Fatal(err)
		}
		if n, _, _, drained := podCredits(e, machine); n == 4 && drained {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connections never drained to their shares: %+v", e.srv.RDMAConnections())
		}
	}
	for _, ci := range e.srv.RDMAConnections() {
		if ci.Machine == machine && ci.Grant < each {
			t.Errorf("connection %s granted %d, want at least %d", ci.Peer, ci.Grant, each)
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	data := make([]byte, 64<<10)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := c.OpenFile(fh)
			for i := 0; ; i++ {
				select {
				case <-stop:
					errs <- f.Commit(ctx)
					return
				default:
				}
				var err error
				if w%2 == 0 {
					_, err = f.WriteAt(ctx, data, int64(w*len(data)))
				} else {
					_, err = c.Getattr(ctx, fh)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var samples, maxGrant, maxHeld int
	limit := max(podGrant, 4) // at least 1 per connection
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); samples++ {
		n, grant, held, _ := podCredits(e, machine)
		if n != 4 {
			t.Fatalf("%d connections of the pod, want 4", n)
		}
		maxGrant, maxHeld = max(maxGrant, grant), max(maxHeld, held)
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("pod grant %d: %d samples, the most granted %d, the most receives held %d; client %+v", podGrant, samples, maxGrant, maxHeld, c.ConnStats())
	if maxGrant > limit || maxHeld > limit {
		t.Errorf("the pod's connections were granted up to %d and held up to %d receives, want at most %d", maxGrant, maxHeld, limit)
	}
	if maxHeld == 0 {
		t.Error("no receive ever held: the sampling saw nothing")
	}
}
