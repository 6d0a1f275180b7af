package rpcrdma

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

func TestFairShares(t *testing.T) {
	for _, tc := range []struct {
		targets []int
		budget  int
		want    []int
	}{
		{[]int{8, 8, 8}, 0, []int{8, 8, 8}},
		{[]int{8, 8, 8}, 24, []int{8, 8, 8}},
		{[]int{8, 8, 8}, 12, []int{4, 4, 4}},
		{[]int{8, 8, 8}, 13, []int{5, 4, 4}},
		{[]int{2, 8, 32}, 20, []int{2, 8, 10}},
		{[]int{2, 8, 32}, 12, []int{2, 5, 5}},
		{[]int{32, 2}, 12, []int{10, 2}},
		{[]int{4, 4, 4}, 2, []int{1, 1, 1}}, // never below 1
		{nil, 10, []int{}},
	} {
		if got := fairShares(tc.targets, tc.budget); !slices.Equal(got, tc.want) {
			t.Errorf("fairShares(%v, %d) = %v, want %v", tc.targets, tc.budget, got, tc.want)
		}
	}
	// Properties: within target, at least 1, within the budget when it can
	// be, and max-min fair (nobody short of its target has less than
	// anybody else's share minus one).
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		n := r.IntN(12) + 1
		targets := make([]int, n)
		sum := 0
		for i := range targets {
			targets[i] = r.IntN(64) + 1
			sum += targets[i]
		}
		budget := r.IntN(200)
		got := fairShares(targets, budget)
		total := 0
		for i, g := range got {
			total += g
			if g < 1 || g > targets[i] {
				t.Fatalf("fairShares(%v, %d) = %v: share %d out of 1..target", targets, budget, got, g)
			}
		}
		if budget > 0 && budget >= n && total > budget {
			t.Fatalf("fairShares(%v, %d) = %v: %d granted", targets, budget, got, total)
		}
		if budget == 0 || sum <= budget {
			if !slices.Equal(got, targets) {
				t.Fatalf("fairShares(%v, %d) = %v: the budget covers every target", targets, budget, got)
			}
			continue
		}
		if budget >= n && total != budget {
			t.Fatalf("fairShares(%v, %d) = %v: %d of the budget left unused", targets, budget, got, budget-total)
		}
		for i, g := range got {
			if g >= targets[i] {
				continue
			}
			for j, h := range got {
				if h > g+1 {
					t.Fatalf("fairShares(%v, %d) = %v: %d short of its target has %d, %d has %d", targets, budget, got, i, g, j, h)
				}
			}
		}
	}
}

// machineClient dials ts as AUTH_SYS machine name, asking for 32 credits.
func machineClient(t *testing.T, ts *testSrv, name string) (*sunrpc.Client, *ClientMetrics) {
	t.Helper()
	m := &ClientMetrics{}
	var auth *sunrpc.AuthSysParams
	if name != "" {
		auth = &sunrpc.AuthSysParams{MachineName: name}
	}
	c, err := sunrpc.NewClient(Dialer(newDev(), ts.srv.Addr().String(), ClientOptions{Credits: 32, Metrics: m, MaxVersion: pinVersion}),
		sunrpc.ClientOptions{AuthSys: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, m
}

func countCall(ctx context.Context, c *sunrpc.Client) error {
	return c.Call(ctx, sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pCount, MaxReplySize: 256})
}

// connByMachine returns the connection of machine name, failing without one.
func connByMachine(t *testing.T, s *Server, name string) ConnInfo {
	t.Helper()
	for _, ci := range s.Connections() {
		if ci.Machine == name {
			return ci
		}
	}
	t.Fatalf("no connection of machine %q in %+v", name, s.Connections())
	return ConnInfo{}
}

// settled waits until every connection of s has posted receives up to its
// grant (receives are reposted just before each reply goes out).
func settled(t *testing.T, s *Server) []ConnInfo {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		cs := s.Connections()
		ok := true
		for _, ci := range cs {
			ok = ok && ci.InProcess == 0 && ci.Posted == ci.Grant
		}
		if ok || time.Now().After(deadline) {
			return cs
		}
		time.Sleep(time.Millisecond)
	}
}

func TestMachineGrants(t *testing.T) { forVersions(t, testMachineGrants) }

func testMachineGrants(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 32, Grant: 16})
	ctx := tctx(t, 20*time.Second)
	ts.srv.SetMachineGrants(map[string]int{"node1/default/pod-a": 4, "node1/default/pod-b": 8, "other": 100})
	a, am := machineClient(t, ts, "node1/default/pod-a")
	b, bm := machineClient(t, ts, "node1/default/pod-b")
	c, cm := machineClient(t, ts, "node1/default/pod-c")
	for _, cl := range []*sunrpc.Client{a, b, c} {
		if err := countCall(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	// The first reply already carries the machine's grant.
	for _, tc := range []struct {
		m     *ClientMetrics
		name  string
		grant int
		named bool
	}{{am, "node1/default/pod-a", 4, true}, {bm, "node1/default/pod-b", 8, true}, {cm, "node1/default/pod-c", 16, false}} {
		if g := tc.m.Metrics().CreditsGranted; g != uint64(tc.grant) {
			t.Errorf("%s: requester was granted %d, want %d", tc.name, g, tc.grant)
		}
		settled(t, ts.srv)
		ci := connByMachine(t, ts.srv, tc.name)
		if ci.Grant != tc.grant || ci.Named != tc.named || ci.Posted != tc.grant {
			t.Errorf("%s: %+v, want grant %d (named %v) and as many receives posted", tc.name, ci, tc.grant, tc.named)
		}
		// software iWARP's summary of the connection as accepted: the
		// tests' devices keep siw's defaults and ask for CRC32c
		if m := ci.Verbs.MPA; m == nil || m.Revision != 2 || !m.CRC || m.ULPDU == 0 || ci.Verbs.IRD == 0 {
			t.Errorf("%s: Verbs %v, want the accepted connection's MPA negotiation (rev 2, CRC)", tc.name, ci.Verbs)
		}
	}
	if g := ts.srv.Metrics().CreditsGranted; g != 4+8+16 {
		t.Errorf("server CreditsGranted %d, want the sum 28", g)
	}

	// Under load each requester keeps within its grant, and the server
	// never has more receives posted plus calls in process than granted.
	ts.delay.Store(int64(200 * time.Microsecond))
	errs := make(chan error, 3*200)
	for _, cl := range []*sunrpc.Client{a, b, c} {
		for range 200 {
			go func() { errs <- countCall(ctx, cl) }()
		}
	}
	for range 3 * 200 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		for _, ci := range ts.srv.Connections() {
			if ci.Posted+ci.InProcess > ci.Grant {
				t.Fatalf("%+v: more receives posted and calls in process than granted", ci)
			}
		}
	}
	ts.delay.Store(0)

	// Grants change at run time: pod-a down to 2, pod-b's grant removed
	// (the default), pod-c named 32.
	// Receives posted under pod-a's grant of 4 drain as its calls use them.
	ts.srv.SetMachineGrants(map[string]int{"node1/default/pod-a": 2, "node1/default/pod-c": 32})
	for _, cl := range []*sunrpc.Client{a, b, c} {
		for range 4 {
			if err := countCall(ctx, cl); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ga, gb, gc := am.Metrics().CreditsGranted, bm.Metrics().CreditsGranted, cm.Metrics().CreditsGranted; ga != 2 || gb != 16 || gc != 32 {
		t.Errorf("after the change: granted %d, %d, %d; want 2, 16, 32", ga, gb, gc)
	}
	for _, ci := range settled(t, ts.srv) {
		if ci.Posted != ci.Grant {
			t.Errorf("%+v: receives posted differ from the grant once idle", ci)
		}
	}
}

func TestReceiveBudget(t *testing.T) { forVersions(t, testReceiveBudget) }

func testReceiveBudget(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 16, Grant: 8, Budget: 12})
	ctx := tctx(t, 20*time.Second)
	var clients []*sunrpc.Client
	var ms []*ClientMetrics
	for _, name := range []string{"n/ns/a", "n/ns/b", "n/ns/c"} {
		c, m := machineClient(t, ts, name)
		clients, ms = append(clients, c), append(ms, m)
		if err := countCall(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// Three connections wanting 8 share 12: 4 each, once a reply told them;
	// receives posted under an earlier higher grant drain as calls use them.
	for i, c := range clients {
		for range 8 {
			if err := countCall(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		if g := ms[i].Metrics().CreditsGranted; g != 4 {
			t.Errorf("client %d granted %d, want 4 (12 shared by 3)", i, g)
		}
	}
	total := 0
	for _, ci := range settled(t, ts.srv) {
		total += ci.Posted
	}
	if total != 12 {
		t.Errorf("%d receives posted over all connections, budget 12: %+v", total, ts.srv.Connections())
	}
	// A named grant below the fair share leaves more for the others.
	ts.srv.SetMachineGrants(map[string]int{"n/ns/a": 2})
	for i, c := range clients {
		if err := countCall(ctx, c); err != nil {
			t.Fatal(err)
		}
		want := []uint64{2, 5, 5}[i]
		if g := ms[i].Metrics().CreditsGranted; g != want {
			t.Errorf("client %d granted %d, want %d", i, g, want)
		}
	}
	// A connection gone gives its share back.
	clients[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(ts.srv.Connections()) != 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for i, c := range clients[1:] {
		if err := countCall(ctx, c); err != nil {
			t.Fatal(err)
		}
		if g := ms[i+1].Metrics().CreditsGranted; g != 6 {
			t.Errorf("client %d granted %d, want 6 (12 shared by 2)", i+1, g)
		}
	}
}

// TestMachineGrantShared: the connections of one machine name (a pod
// with several volumes of the server, each mounted on its own connection)
// share the machine's grant instead of getting it each; when one closes,
// the others get its share back.
func TestMachineGrantShared(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 32, Grant: 16})
	ctx := tctx(t, 20*time.Second)
	const pod = "node1/default/pod-a"
	ts.srv.SetMachineGrants(map[string]int{pod: 9})
	var clients []*sunrpc.Client
	var ms []*ClientMetrics
	for range 2 {
		c, m := machineClient(t, ts, pod)
		clients, ms = append(clients, c), append(ms, m)
	}
	other, om := machineClient(t, ts, "node1/default/pod-b")
	// The replies after the second connection named its machine carry
	// the shared grant; receives posted under the first connection's
	// earlier grant of 9 drain as its calls use them.
	for range 10 {
		for _, c := range append(clients, other) {
			if err := countCall(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	g0, g1 := ms[0].Metrics().CreditsGranted, ms[1].Metrics().CreditsGranted
	if g0+g1 != 9 || min(g0, g1) != 4 {
		t.Errorf("two connections of %s granted %d and %d; want the machine's 9 shared (5 and 4)", pod, g0, g1)
	}
	if g := om.Metrics().CreditsGranted; g != 16 {
		t.Errorf("a machine without a grant of its own was granted %d, want the default 16", g)
	}
	sum := 0
	for _, ci := range settled(t, ts.srv) {
		if ci.Machine == pod {
			sum += ci.Posted
			if !ci.Named {
				t.Errorf("%+v: not named", ci)
			}
		}
	}
	if sum != 9 {
		t.Errorf("%d receives posted for %s, want its grant of 9: %+v", sum, pod, ts.srv.Connections())
	}
	clients[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(ts.srv.Connections()) != 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := countCall(ctx, clients[1]); err != nil {
		t.Fatal(err)
	}
	if g := ms[1].Metrics().CreditsGranted; g != 9 {
		t.Errorf("the connection left of %s granted %d, want the whole 9", pod, g)
	}
}

// TestGrantOverrun: a requester that sends more calls than it was granted
// finds no receive posted; the RDMA layer terminates the connection
// (RFC 8166 section 3.3.1), and no call beyond the grant is processed.
func TestGrantOverrun(t *testing.T) {
	ts := startServer(t, ServerOptions{Credits: 16, Grant: 2})
	d := newDev()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(64)
	qp, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, MaxSendWR: 16, MaxRecvWR: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close(); cq.Close() })
	rb, _ := pd.RegMR(make([]byte, 16*4096), verbs.AccessLocalWrite)
	for i := range 16 {
		if err := qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rb.SGE(i*4096, 4096)}}); err != nil {
			t.Fatal(err)
		}
	}
	pdata, _ := defaultPrivateData().Append(nil)
	if _, err := d.Connect(tctx(t, 10*time.Second), ts.srv.Addr().String(), qp, verbs.ConnParam{PrivateData: pdata, ResponderResources: 4}); err != nil {
		t.Fatal(err)
	}
	const n = 8
	sb, _ := pd.RegMR(make([]byte, (n+1)*128), 0)
	// send posts call i; false when the QP already left RTS (the server
	// terminated the connection, the outcome wanted) and i > 0.
	send := func(i int) bool {
		xid := uint32(0x1000 + i)
		var m []byte
		for _, v := range []uint32{xid, Version, 32, uint32(ProcMsg), 0, 0, 0, // transport header
			xid, 0, 2, tProg, tVers, pCount, 0, 0, 0, 0} { // RPC call, AUTH_NONE
			m = be.AppendUint32(m, v)
		}
		copy(sb.Bytes()[i*128:], m)
		if err := qp.PostSend(&verbs.SendWR{ID: uint64(100 + i), Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.SGE(i*128, len(m))}}); err != nil {
			if i > 0 && errors.Is(err, verbs.ErrQPState) {
				return false
			}
			t.Fatal(err)
		}
		return true
	}
	// One call, as RFC 8166 section 3.3.3 allows; its reply grants 2.
	send(0)
	ctx := tctx(t, 10*time.Second)
	var wc [1]verbs.WC
	for {
		if cq.Poll(wc[:]) == 1 {
			if wc[0].Status != verbs.WCSuccess {
				t.Fatalf("%+v", wc[0])
			}
			if wc[0].Opcode == verbs.WCRecv {
				break
			}
			continue
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatal("no reply:", err)
		}
	}
	if got := be.Uint32(rb.Bytes()[wc[0].ID*4096+8:]); got != 2 {
		t.Fatalf("reply granted %d credits, want 2", got)
	}
	// Then eight at once, ignoring the grant, each held by the server.
	ts.delay.Store(int64(500 * time.Millisecond))
	for i := 1; i <= n; i++ {
		if !send(i) {
			break
		}
	}
	select {
	case <-qp.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the connection survived %d calls against a grant of 2; server %+v", n, ts.srv.Connections())
	}
	if got := ts.calls.Load(); got > 1+2 {
		t.Errorf("%d calls processed with a grant of 2 (after the first)", got)
	}
	t.Logf("connection ended: %v; %d calls processed", qp.Err(), ts.calls.Load())
}

// TestRecentXIDs: a retransmission is the same XID from the same host
// (on any connection); the same XID from another host is another call;
// the window forgets the oldest calls.
func TestRecentXIDs(t *testing.T) {
	var r recentXIDs
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	if r.seen(xidKey{a, 7}) || r.seen(xidKey{b, 7}) {
		t.Fatal("first calls counted as retransmissions")
	}
	if !r.seen(xidKey{a, 7}) || !r.seen(xidKey{b, 7}) {
		t.Fatal("retransmissions not counted")
	}
	c := &srvConn{addr: &net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.1"), Port: 999}}
	if !r.seen(c.callKey(7)) {
		t.Fatal("the same host on another connection (v4-mapped) not recognised")
	}
	for i := range uint32(xidShards * xidShardLen) { // consecutive XIDs, as a client's
		r.seen(xidKey{a, 1000 + i})
	}
	if r.seen(xidKey{b, 7}) {
		t.Fatal("a call older than the window still remembered")
	}
}

// TestReceivedLockFree: a receive completion (received, in the completion
// goroutine) moves a credit from posted to in process without the lock
// that finish holds while it posts a reply's Send, so that a Send in
// progress never holds up the completions of the connection.
func TestReceivedLockFree(t *testing.T) {
	var c srvConn
	c.cred.held = 3  // 3 receives posted
	c.cred.mu.Lock() // as finish, across PostSend
	done := make(chan struct{})
	go func() {
		c.received()
		c.received()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.cred.mu.Unlock()
		t.Fatal("received waited for the lock finish holds across PostSend")
	}
	c.cred.mu.Unlock()
	w := int(c.cred.working.Load())
	if p := c.cred.held - w; p != 1 || w != 2 {
		t.Errorf("after 2 receives of 3 posted: posted %d, in process %d; want 1, 2", p, w)
	}
}
