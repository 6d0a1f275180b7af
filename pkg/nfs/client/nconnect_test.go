package client

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/exporttest"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// connListener is the export server's NFS listener over TCP, counting the
// bytes it reads from each accepted connection; it can end a connection
// from the server's side and refuse new ones (accept, then close).
type connListener struct {
	net.Listener
	mu     sync.Mutex
	conns  []*countConn
	refuse atomic.Bool
}

type countConn struct {
	net.Conn
	read atomic.Int64
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (l *connListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.refuse.Load() {
			c.Close()
			continue
		}
		cc := &countConn{Conn: c}
		l.mu.Lock()
		l.conns = append(l.conns, cc)
		l.mu.Unlock()
		return cc, nil
	}
}

// accepted returns the connections accepted so far, in order.
func (l *connListener) accepted() []*countConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*countConn(nil), l.conns...)
}

// callLog is an observer of the export server's calls: the NFS calls
// per connection (peer address) and each XID's count.
type callLog struct {
	mu    sync.Mutex
	peers map[string]uint64
	xids  map[uint32]int
}

func (l *callLog) ObserveCall(req *sunrpc.Request, _ sunrpc.CallStatus, _ time.Duration) {
	if req.Prog != nfs3.Program {
		return
	}
	l.mu.Lock()
	l.peers[req.Peer.String()]++
	l.xids[req.XID]++
	l.mu.Unlock()
}

// check fails t unless conns connections carried the NFS calls, about
// evenly, each call with an XID of its own, the XIDs of all connections
// one run of consecutive values (one counter for the set).
func (l *callLog) check(t *testing.T, conns int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.peers) != conns {
		t.Fatalf("the server saw NFS calls from %d connections, want %d: %v", len(l.peers), conns, l.peers)
	}
	var counts []uint64
	for _, n := range l.peers {
		counts = append(counts, n)
	}
	checkSpread(t, "NFS calls at the server", counts)
	xids := make([]uint32, 0, len(l.xids))
	for xid, n := range l.xids {
		if n > 1 {
			t.Errorf("XID %#x was used by %d calls", xid, n)
		}
		xids = append(xids, xid)
	}
	slices.Sort(xids)
	gaps := 0
	for i := 1; i < len(xids); i++ {
		if xids[i]-xids[i-1] != 1 {
			gaps++
		}
	}
	if wrapped := xids[0] == 0 && xids[len(xids)-1] == math.MaxUint32; gaps > 1 || gaps == 1 && !wrapped {
		t.Errorf("the XIDs of the connections are %d runs, want one sequence", gaps+1)
	}
}

func observeCalls(srv *nfsserver.Server) *callLog {
	l := &callLog{peers: map[string]uint64{}, xids: map[uint32]int{}}
	srv.Dispatcher().SetObserver(l)
	return l
}

// startNConnect starts our export server on a temporary directory, NFS
// over TCP through a connListener and, when rdma, over RPC-over-RDMA
// (software iWARP), and returns mount options for nconnect connections
// over proto "tcp" or "rdma".
func startNConnect(t *testing.T, rdma bool, nconnect int) (Options, *connListener, *nfsserver.Server) {
	t.Helper()
	var nl *connListener
	e := exporttest.Start(t, exporttest.Options{
		Exports: []nfsserver.Export{{Path: "/"}}, RDMA: rdma,
		SIW: siw.Config{RTRDelay: -1}, RDMAOptions: rpcrdma.ServerOptions{Credits: 16},
		WrapNFS: func(l net.Listener) net.Listener { nl = &connListener{Listener: l}; return nl },
	})
	opts := Options{
		Server: "127.0.0.1", NFSPort: e.NFSPort, MountPort: e.MntPort,
		Export: "/", AuthSys: sunrpc.AuthSysParams{MachineName: "node/ns/pod"}, NConnect: nconnect,
	}
	if rdma {
		opts.Transport = "rdma"
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(e.RDMAPort))
		opts.Dial = rpcrdma.Dialer(siw.NewDevice(siw.Config{RTRDelay: -1}), addr, rpcrdma.ClientOptions{Credits: 16})
	}
	return opts, nl, e.Srv
}

func mountN(t *testing.T, opts Options) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Mount(ctx, opts)
	if err != nil {
		t.Fatal("mount:", err)
	}
	t.Cleanup(func() { c.Unmount(context.Background()) })
	return c
}

// checkSpread fails t unless each of counts is at least a third of an
// even share of their total.
func checkSpread[T int64 | uint64](t *testing.T, what string, counts []T) {
	t.Helper()
	var total T
	for _, n := range counts {
		total += n
	}
	for i, n := range counts {
		if n*3*T(len(counts)) < total {
			t.Errorf("%s: connection %d has %d of %d: not spread (%v)", what, i, n, total, counts)
		}
	}
}

// nconnect=4 over TCP: the server accepts four NFS connections, and the
// bytes it reads from each are about a quarter of the calls' (counted at
// the server, per connection); the client's counters agree.
func TestNConnectSpreadsCallsTCP(t *testing.T) {
	opts, nl, srv := startNConnect(t, false, 4)
	calls := observeCalls(srv)
	c := mountN(t, opts)
	ctx := tctx(t)
	for range 400 {
		if _, err := c.Getattr(ctx, c.Root()); err != nil {
			t.Fatal(err)
		}
	}
	conns := nl.accepted()
	if len(conns) != 4 {
		t.Fatalf("the server accepted %d NFS connections, want 4", len(conns))
	}
	read := make([]int64, len(conns))
	for i, cc := range conns {
		read[i] = cc.read.Load()
	}
	checkSpread(t, "bytes read by the server", read)
	calls.check(t, 4)
	var ccalls []uint64
	for _, st := range c.ConnStats() {
		ccalls = append(ccalls, st.Calls)
	}
	checkSpread(t, "calls of the client", ccalls)
	if got := c.Stats().Calls; got < 401 {
		t.Errorf("Stats().Calls = %d, want at least 401 (FSINFO and 400 GETATTR)", got)
	}
}

// nconnect=4 over RPC-over-RDMA (software iWARP): the server holds four
// connections of the mount's machine name, and the calls are spread.
func TestNConnectSpreadsCallsRDMA(t *testing.T) {
	opts, _, srv := startNConnect(t, true, 4)
	log := observeCalls(srv)
	c := mountN(t, opts)
	ctx := tctx(t)
	for range 400 {
		if _, err := c.Getattr(ctx, c.Root()); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, ci := range srv.RDMAConnections() {
		if ci.Machine == opts.AuthSys.MachineName {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("the server has %d RDMA connections of %q, want 4: %+v", n, opts.AuthSys.MachineName, srv.RDMAConnections())
	}
	log.check(t, 4)
}

// ioWorkers runs workers goroutines, each writing its own file of size
// bytes in 64 KiB writes, committing, and reading it back, rounds times;
// done counts the files verified. It returns the first error.
func ioWorkers(ctx context.Context, c *Client, workers, rounds, size int, done *atomic.Int64) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				name := fmt.Sprintf("w%d-%d", w, r)
				fh, _, err := c.CreateFile(ctx, c.Root(), name, 0o644, false)
				if err != nil {
					errs <- err
					return
				}
				data := randBytes(size, uint64(w*1000+r))
				f := c.OpenFile(fh)
				for off := 0; off < size; off += 64 << 10 {
					if _, err := f.WriteAt(ctx, data[off:min(off+64<<10, size)], int64(off)); err != nil {
						errs <- fmt.Errorf("%s: write: %w", name, err)
						return
					}
				}
				if err := f.Commit(ctx); err != nil {
					errs <- fmt.Errorf("%s: commit: %w", name, err)
					return
				}
				got := make([]byte, size)
				if n, err := c.ReadAt(ctx, fh, got, 0); err != nil || n != size || !bytes.Equal(got, data) {
					errs <- fmt.Errorf("%s: read back %d bytes, %v; equal %v", name, n, err, bytes.Equal(got, data))
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// Concurrent writes and reads of many files with nconnect=4 over TCP
// while the server ends one connection mid-run, then refuses new
// connections for a while: every byte reads back as written, the calls of
// the dead connection are retransmitted after its reconnect, and new
// calls keep flowing on the other three while it cannot reconnect.
func TestNConnectConnectionLossTCP(t *testing.T) {
	opts, nl, srv := startNConnect(t, false, 4)
	c := mountN(t, opts)
	ctx := tctx(t)
	var done atomic.Int64
	res := make(chan error, 1)
	go func() { res <- ioWorkers(ctx, c, 8, 12, 512<<10, &done) }()

	for done.Load() < 8 {
		select {
		case err := <-res:
			t.Fatalf("the I/O ended before the kill: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	if n := len(nl.accepted()); n != 4 {
		t.Fatalf("%d NFS connections before the kill, want 4", n)
	}
	nl.refuse.Store(true)
	nl.accepted()[1].Close() // the server ends the second connection
	// while it cannot reconnect (its probes refused for at least three
	// probe intervals), files keep being verified over the other three,
	// however slow the machine
	before := done.Load()
	var ioErr error
	ended := false
	refused := time.After(3 * probeInterval)
	for stuck := time.After(30 * time.Second); (done.Load()-before < 4 || refused != nil) && !ended; {
		select {
		case ioErr = <-res:
			ended = true
		case <-stuck:
			t.Fatalf("%d files verified in 30 s while one connection could not reconnect, want 4: calls did not move to the live connections", done.Load()-before)
		case <-refused:
			refused = nil
		case <-time.After(time.Millisecond):
		}
	}
	during := done.Load() - before
	nl.refuse.Store(false)
	if !ended {
		ioErr = <-res
	}
	if ioErr != nil {
		t.Fatal(ioErr)
	}
	if during < 4 {
		t.Errorf("%d files verified while one connection could not reconnect, want at least 4: calls did not move to the live connections", during)
	}
	// calls after the refusal ends probe the dead connection and dial it
	// again, if the I/O did not run long enough to
	for deadline := time.Now().Add(10 * time.Second); len(nl.accepted()) < 5 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := c.Getattr(ctx, c.Root()); err != nil {
			t.Fatal("GETATTR after the refusal:", err)
		}
	}
	if n := len(nl.accepted()); n < 5 {
		t.Errorf("%d NFS connections accepted, want a reconnect (at least 5)", n)
	}
	st := c.Stats()
	t.Logf("client: %+v; per connection %+v; server DRC %+v; files verified while refused %d", st, c.ConnStats(), srv.DRCStats(), during)
	if st.Reconnects == 0 {
		t.Error("no reconnect counted")
	}
}

// The same over RPC-over-RDMA with nconnect=4: concurrent I/O reads back
// as written.
func TestNConnectConcurrentIORDMA(t *testing.T) {
	opts, _, _ := startNConnect(t, true, 4)
	c := mountN(t, opts)
	var done atomic.Int64
	if err := ioWorkers(tctx(t), c, 8, 4, 512<<10, &done); err != nil {
		t.Fatal(err)
	}
	var calls []uint64
	for _, st := range c.ConnStats() {
		calls = append(calls, st.Calls)
	}
	checkSpread(t, "calls", calls)
}

// A connection the server ends while no call is on it is skipped by new
// calls, then probed (every probeInterval) and so dialed again: the set
// gets back to two live connections with calls on both.
func TestNConnectIdleLossReconnects(t *testing.T) {
	opts, nl, _ := startNConnect(t, false, 2)
	c := mountN(t, opts)
	ctx := tctx(t)
	for range 10 {
		if _, err := c.Getattr(ctx, c.Root()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(nl.accepted()); n != 2 {
		t.Fatalf("%d NFS connections, want 2", n)
	}
	nl.accepted()[0].Close()
	deadline := time.Now().Add(10 * probeInterval)
	for len(nl.accepted()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the closed connection was not dialed again within %v: %+v", 10*probeInterval, c.ConnStats())
		}
		if _, err := c.Getattr(ctx, c.Root()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := nl.accepted()[2].read.Load()
	for range 20 {
		if _, err := c.Getattr(ctx, c.Root()); err != nil {
			t.Fatal(err)
		}
	}
	if nl.accepted()[2].read.Load() == before {
		t.Error("no call on the new connection")
	}
}
