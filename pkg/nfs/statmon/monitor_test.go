package statmon

import (
	"context"
	"errors"
	"math"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/rpctest"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// serve serves srv on a new loopback TCP port until the test ends and
// returns the port.
func serve(t *testing.T, srv *sunrpc.Server) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sunrpc.ServeTCP(ctx, ln, srv, sunrpc.TCPOptions{})
	}()
	t.Cleanup(func() { stop(); ln.Close(); <-done })
	return ln.Addr().(*net.TCPAddr).Port
}

// portmapper serves PMAPPROC_GETPORT (RFC 1833 section 3.2) answering
// ports[prog] whatever the version and protocol.
func portmapper(t *testing.T, ports map[uint32]int) int {
	t.Helper()
	h := make([]sunrpc.Handler, sunrpc.PortmapProcGetPort+1)
	h[sunrpc.PortmapProcGetPort] = func(_ context.Context, r *sunrpc.Request, res *sunrpc.Builder) error {
		d := r.ArgsDecoder()
		prog := d.Uint32()
		d.Uint32()
		d.Uint32()
		d.Uint32()
		if err := d.Err(); err != nil {
			return err
		}
		res.Uint32(uint32(ports[prog]))
		return nil
	}
	srv := sunrpc.NewServer(nil)
	srv.Register(sunrpc.PortmapProgram, sunrpc.PortmapVersion, h)
	return serve(t, srv)
}

func enc(m interface{ Encode(*xdr.Encoder) }) []byte {
	var e xdr.Encoder
	m.Encode(&e)
	return e.Bytes()
}

// nsmCall calls NSM proc at port from a reserved port when reserved (and
// the process may bind one), else from any.
func nsmCall(t *testing.T, port int, reserved bool, proc uint32, args []byte, results func(*xdr.Decoder, int) error) error {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	dial := func(ctx context.Context) (net.Conn, error) {
		if reserved {
			return sunrpc.DialReserved(ctx, nil, addr)
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	return rpctest.CallRaw(t, dial, nsm.Program, nsm.Version, proc, args, results)
}

// TestSimuCrash: SM_SIMU_CRASH from a reserved port of this host moves
// the state two on, forgets the monitors and sends each monitored host
// (its NSM found through its rpcbind) SM_NOTIFY with the name its lock
// manager knows this host by and the new state; from a port that is not
// reserved it does nothing.
func TestSimuCrash(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SM_SIMU_CRASH is taken from a reserved port only: needs root")
	}
	got := make(chan nsm.StatChge, 4)
	peer := sunrpc.NewServer(nil)
	ph := make([]sunrpc.Handler, nsm.NumProcs)
	ph[nsm.ProcNotify] = func(_ context.Context, r *sunrpc.Request, _ *sunrpc.Builder) error {
		var a nsm.StatChge
		if err := a.Decode(r.ArgsDecoder()); err != nil {
			return err
		}
		got <- a
		return nil
	}
	peer.Register(nsm.Program, nsm.Version, ph)
	peerNSM := serve(t, peer)

	m := &Monitor{RPCBind: "127.0.0.1:1", State: func() int32 { return 7 }, PeerRPCBindPort: portmapper(t, map[uint32]int{nsm.Program: peerNSM})}
	srv := sunrpc.NewServer(nil)
	srv.Register(nsm.Program, nsm.Version, m.Handlers(nil))
	port := serve(t, srv)

	my := nsm.MyID{MyName: "me.example", MyProg: nlm.Program, MyVers: 4, MyProc: 16}
	for _, name := range []string{"127.0.0.1", "localhost"} {
		var r nsm.StatRes
		a := nsm.Mon{MonID: nsm.MonID{MonName: name, MyID: my}}
		if err := nsmCall(t, port, false, nsm.ProcMon, enc(&a), func(d *xdr.Decoder, _ int) error { return r.Decode(d) }); err != nil || r.Res != nsm.StatSucc || r.State != 7 {
			t.Fatalf("SM_MON %s: %+v, %v", name, r, err)
		}
	}
	if err := nsmCall(t, port, false, nsm.ProcSimuCrash, nil, nil); err != nil {
		t.Fatal(err)
	}
	if m.LocalState() != 7 || len(m.Monitors()) != 2 {
		t.Fatalf("SM_SIMU_CRASH from a port that is not reserved: state %d, %d monitors; want 7 and 2", m.LocalState(), len(m.Monitors()))
	}
	if err := nsmCall(t, port, true, nsm.ProcSimuCrash, nil, nil); err != nil {
		t.Fatal(err)
	}
	if m.LocalState() != 9 || len(m.Monitors()) != 0 {
		t.Fatalf("after SM_SIMU_CRASH: state %d, %d monitors; want 9 and none", m.LocalState(), len(m.Monitors()))
	}
	seen := 0
	for seen < 2 {
		select {
		case a := <-got:
			if a.MonName != "me.example" || a.State != 9 {
				t.Fatalf("monitored host got SM_NOTIFY %+v, want me.example state 9", a)
			}
			seen++
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 2 monitored hosts notified", seen)
		}
	}
}

// TestRefusals: SM_MON refuses an empty mon_name and callbacks to any
// program but NLM; a monitor asked again takes the new private bytes.
func TestRefusals(t *testing.T) {
	m := &Monitor{}
	my := nsm.MyID{MyName: "me", MyProg: nlm.Program, MyVers: 3, MyProc: 16}
	if m.monitor(&nsm.Mon{MonID: nsm.MonID{MyID: my}}) {
		t.Error("SM_MON with an empty mon_name kept")
	}
	bad := my
	bad.MyProg = 100005
	if m.monitor(&nsm.Mon{MonID: nsm.MonID{MonName: "h", MyID: bad}}) {
		t.Error("SM_MON for a callback to MOUNT kept")
	}
	a := nsm.Mon{MonID: nsm.MonID{MonName: "h", MyID: my}, Priv: [16]byte{1}}
	m.monitor(&a)
	a.Priv[0] = 2
	if !m.monitor(&a) {
		t.Fatal("SM_MON again refused")
	}
	if ms := m.Monitors(); len(ms) != 1 || ms[0].Priv[0] != 2 {
		t.Errorf("monitors %+v, want one with the new private bytes", ms)
	}
	if s := m.LocalState(); s&1 != 1 || s != m.LocalState() {
		t.Errorf("volatile state %d: not odd or not stable", s)
	}
}

func TestStateWraps(t *testing.T) {
	m := &Monitor{State: func() int32 { return math.MaxInt32 - 2 }}
	m.crash()
	if s := m.LocalState(); s != math.MaxInt32 {
		t.Errorf("state %d, want 2^31-1", s)
	}
	m.crash()
	if s := m.LocalState(); s != 3 {
		t.Errorf("state %d after passing 2^31-1, want 3 (2^31-1 taken off, an even number)", s)
	}
}

func TestIsLocal(t *testing.T) {
	for _, c := range []struct {
		addr            net.Addr
		local, reserved bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 700}, true, true},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:127.0.0.1"), Port: 2000}, true, false},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 1023}, true, true},
		{&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1024}, true, false},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 700}, false, true},
		{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 700}, false, true},
		{&net.UnixAddr{Name: "x"}, false, false},
		{nil, false, false},
	} {
		if l, r := isLocal(c.addr); l != c.local || r != c.reserved {
			t.Errorf("isLocal(%v) = %v, %v; want %v, %v", c.addr, l, r, c.local, c.reserved)
		}
	}
}

// FuzzHandlers runs every NSM procedure of a Monitor on arbitrary
// arguments from a local caller: GARBAGE_ARGS or an answer, never a
// panic.
func FuzzHandlers(f *testing.F) {
	my := nsm.MyID{MyName: "me", MyProg: nlm.Program, MyVers: 4, MyProc: 16}
	f.Add(uint8(nsm.ProcStat), enc(&nsm.SMName{MonName: "h"}))
	f.Add(uint8(nsm.ProcMon), enc(&nsm.Mon{MonID: nsm.MonID{MonName: "h", MyID: my}}))
	f.Add(uint8(nsm.ProcUnmon), enc(&nsm.MonID{MonName: "h", MyID: my}))
	f.Add(uint8(nsm.ProcUnmonAll), enc(&my))
	f.Add(uint8(nsm.ProcNotify), enc(&nsm.StatChge{MonName: "h", State: 3}))
	f.Add(uint8(nsm.ProcSimuCrash), []byte{})
	m := &Monitor{RPCBind: "127.0.0.1:1", Timeout: 100 * time.Millisecond}
	h := m.Handlers(func(context.Context, *sunrpc.Request, *nsm.StatChge) {})
	f.Fuzz(func(t *testing.T, proc uint8, args []byte) {
		fn := h[int(proc)%len(h)]
		// not a reserved port: SM_SIMU_CRASH would notify the hosts
		// the inputs name
		req := &sunrpc.Request{Prog: nsm.Program, Vers: nsm.Version, Proc: uint32(proc) % nsm.NumProcs, Args: args,
			Peer: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}}
		var b sunrpc.Builder
		if err := fn(context.Background(), req, &b); err != nil && !errors.Is(err, sunrpc.ErrGarbageArgs) {
			t.Fatalf("%s: %v, want GARBAGE_ARGS or an answer", nsm.ProcName(req.Proc), err)
		}
	})
}
