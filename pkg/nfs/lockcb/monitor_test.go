package lockcb

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/rpctest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// lockManager stands in for a lock manager of the host (Linux lockd,
// Ganesha's NLM): an NLM program version of its own whose procedure
// monProc takes the status monitor's callbacks, registered over TCP with
// the rpcbind at rb until the test ends.
type lockManager struct {
	vers uint32
	got  chan callback
}

type callback struct {
	st   nlm.SMStatus
	peer net.Addr
}

const monProc = 16 // NLMPROC_NSM_NOTIFY

func startLockManager(t *testing.T, rb string) *lockManager {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// a version of NLM no lock manager registers, so that the real
	// rpcbind of the host is shared without a clash
	lm := &lockManager{vers: 0x7000 + uint32(os.Getpid()%0x1000), got: make(chan callback, 8)}
	h := make([]sunrpc.Handler, monProc+1)
	h[monProc] = func(_ context.Context, r *sunrpc.Request, _ *sunrpc.Builder) error {
		var s nlm.SMStatus
		if err := s.Decode(r.ArgsDecoder()); err != nil {
			return err
		}
		lm.got <- callback{s, r.Peer}
		return nil
	}
	srv := sunrpc.NewServer(nil)
	srv.Register(nlm.Program, lm.vers, h)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sunrpc.ServeTCP(ctx, ln, srv, sunrpc.TCPOptions{})
	}()
	m := sunrpc.Mapping{Prog: nlm.Program, Vers: lm.vers, Prot: sunrpc.IPProtoTCP, Port: uint32(ln.Addr().(*net.TCPAddr).Port)}
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = sunrpc.PortmapUnset(rctx, rb, m)
	if err := sunrpc.PortmapSet(rctx, rb, m); err != nil {
		t.Fatal("rpcbind SET:", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = sunrpc.PortmapUnset(ctx, rb, m)
		stop()
		ln.Close()
		<-done
	})
	return lm
}

// expect waits for one callback and checks it.
func (lm *lockManager) expect(t *testing.T, monName string, state int32, priv string) {
	t.Helper()
	select {
	case c := <-lm.got:
		if c.st.MonName != monName || c.st.State != state || string(c.st.Priv[:]) != priv {
			t.Fatalf("callback got %+v, want mon_name %q state %d priv %q", c.st, monName, state, priv)
		}
		ap := c.peer.(*net.TCPAddr).AddrPort()
		if os.Geteuid() == 0 && ap.Port() >= 1024 {
			t.Errorf("callback from port %d: as root it is made from a reserved port (Linux lockd takes no other)", ap.Port())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no callback for %s state %d", monName, state)
	}
}

// expectNone checks that no callback comes within a while.
func (lm *lockManager) expectNone(t *testing.T, what string) {
	t.Helper()
	select {
	case c := <-lm.got:
		t.Fatalf("%s: callback %+v", what, c.st)
	case <-time.After(500 * time.Millisecond):
	}
}

// callFrom calls prog/proc on the service's TCP port from the address
// src (port 0: any) with raw XDR args.
func callFrom(t *testing.T, s *Service, src string, proc uint32, args []byte, results func(*xdr.Decoder, int) error) error {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(s.Port())
	dial := func(ctx context.Context) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		return d.DialContext(ctx, "tcp", addr)
	}
	return rpctest.CallRaw(t, dial, nsm.Program, nsm.Version, proc, args, results)
}

func enc(m interface{ Encode(*xdr.Encoder) }) []byte {
	var e xdr.Encoder
	m.Encode(&e)
	return e.Bytes()
}

// smMon calls SM_MON from src and returns the answer.
func smMon(t *testing.T, s *Service, src string, a nsm.Mon) nsm.StatRes {
	t.Helper()
	var r nsm.StatRes
	if err := callFrom(t, s, src, nsm.ProcMon, enc(&a), func(d *xdr.Decoder, _ int) error { return r.Decode(d) }); err != nil {
		t.Fatal("SM_MON:", err)
	}
	return r
}

// smUnmon calls SM_UNMON (a *nsm.MonID) or SM_UNMON_ALL (a *nsm.MyID)
// from src and returns the state answered.
func smUnmon(t *testing.T, s *Service, src string, proc uint32, a interface{ Encode(*xdr.Encoder) }) int32 {
	t.Helper()
	var r nsm.Stat
	if err := callFrom(t, s, src, proc, enc(a), func(d *xdr.Decoder, _ int) error { return r.Decode(d) }); err != nil {
		t.Fatal(nsm.ProcName(proc), err)
	}
	return r.State
}

func smNotify(t *testing.T, s *Service, src, monName string, state int32) {
	t.Helper()
	if err := callFrom(t, s, src, nsm.ProcNotify, enc(&nsm.StatChge{MonName: monName, State: state}), nil); err != nil {
		t.Fatal("SM_NOTIFY:", err)
	}
}

// TestStatusMonitor: the service's NSM is the node's status monitor for
// its lock managers. SM_MON from 127.0.0.1 is recorded and answered with
// the odd state SM_STAT gives; an SM_NOTIFY for the monitored host calls
// the lock manager back (through the real rpcbind) with mon_name, the new
// state and the monitor's private bytes, once per state, and still
// reaches the mount holding locks on that server; SM_MON, SM_UNMON and
// SM_UNMON_ALL from 127.0.0.2 change nothing; after SM_UNMON no callback
// comes; SM_UNMON_ALL forgets the monitors of one my_id only; bad
// arguments get GARBAGE_ARGS.
func TestStatusMonitor(t *testing.T) {
	rb := testenv.NeedRPCBind(t)
	s := startServiceWith(t, filepath.Join(t.TempDir(), "lockd.sock"), rb)
	lm := startLockManager(t, rb)
	p := &mountProc{stat: nlm.Granted}
	a := Attach(s.Socket, "31", p.handle)
	defer a.Close()
	a.SetServers([]string{"server-m"})
	waitFor(t, "attached", func() bool { return len(s.Attached()) == 1 })

	var st nsm.StatRes
	if err := callFrom(t, s, "127.0.0.1", nsm.ProcStat, enc(&nsm.SMName{MonName: "server-m"}), func(d *xdr.Decoder, _ int) error { return st.Decode(d) }); err != nil {
		t.Fatal("SM_STAT:", err)
	}
	state := st.State
	if st.Res != nsm.StatSucc || state&1 != 1 || state != s.Monitor().LocalState() {
		t.Fatalf("SM_STAT = %+v, want stat_succ and the odd state %d", st, s.Monitor().LocalState())
	}

	my := nsm.MyID{MyName: "this-node", MyProg: nlm.Program, MyVers: lm.vers, MyProc: monProc}
	mon := nsm.Mon{MonID: nsm.MonID{MonName: "server-m", MyID: my}}
	copy(mon.Priv[:], "sixteen-priv-one")
	if r := smMon(t, s, "127.0.0.1", mon); r.Res != nsm.StatSucc || r.State != state {
		t.Fatalf("SM_MON from 127.0.0.1 = %+v, want stat_succ state %d", r, state)
	}

	// a caller not on 127.0.0.1 changes nothing
	other := mon
	other.MonID.MonName = "server-x"
	if r := smMon(t, s, "127.0.0.2", other); r.Res != nsm.StatFail || r.State != -1 {
		t.Errorf("SM_MON from 127.0.0.2 = %+v, want stat_fail state -1", r)
	}
	if n := smUnmon(t, s, "127.0.0.2", nsm.ProcUnmon, &mon.MonID); n != state {
		t.Errorf("SM_UNMON from 127.0.0.2 = state %d, want %d", n, state)
	}
	smUnmon(t, s, "127.0.0.2", nsm.ProcUnmonAll, &my)
	if ms := s.Monitor().Monitors(); len(ms) != 1 || ms[0].MonID != mon.MonID || ms[0].Priv != mon.Priv {
		t.Fatalf("monitors after calls from 127.0.0.2: %+v, want the one from 127.0.0.1", ms)
	}
	// not NLM: refused, as rpc.statd does
	np := mon
	np.MonID.MyID.MyProg = 100003
	if r := smMon(t, s, "127.0.0.1", np); r.Res != nsm.StatFail {
		t.Errorf("SM_MON for a callback to program 100003 = %+v, want stat_fail", r)
	}

	// the monitored server restarted; it notifies from its own address
	smNotify(t, s, "127.0.0.2", "server-m", 41)
	lm.expect(t, "server-m", 41, "sixteen-priv-one")
	waitFor(t, "SM_NOTIFY routed to the mount", func() bool { return len(p.got()) == 1 })
	smNotify(t, s, "127.0.0.2", "server-m", 41) // a retransmission
	lm.expectNone(t, "SM_NOTIFY with a state already passed on")
	smNotify(t, s, "127.0.0.2", "SERVER-M", 43) // host names compare without case
	lm.expect(t, "SERVER-M", 43, "sixteen-priv-one")
	smNotify(t, s, "127.0.0.2", "server-z", 45)
	lm.expectNone(t, "SM_NOTIFY for a host not monitored")

	if n := smUnmon(t, s, "127.0.0.1", nsm.ProcUnmon, &mon.MonID); n != state {
		t.Errorf("SM_UNMON = state %d, want %d", n, state)
	}
	if ms := s.Monitor().Monitors(); len(ms) != 0 {
		t.Fatalf("monitors after SM_UNMON: %+v", ms)
	}
	smNotify(t, s, "127.0.0.2", "server-m", 47)
	lm.expectNone(t, "SM_NOTIFY after SM_UNMON")

	// SM_UNMON_ALL forgets one my_id's monitors
	smMon(t, s, "127.0.0.1", mon)
	smMon(t, s, "127.0.0.1", other)
	third := mon
	third.MonID.MyID.MyName = "other-name"
	smMon(t, s, "127.0.0.1", third)
	smUnmon(t, s, "127.0.0.1", nsm.ProcUnmonAll, &my)
	if ms := s.Monitor().Monitors(); len(ms) != 1 || ms[0].MonID != third.MonID {
		t.Fatalf("monitors after SM_UNMON_ALL: %+v, want the other my_name's", ms)
	}
	// a host monitored by its address is matched by the address the
	// SM_NOTIFY comes from, whatever mon_name it sends
	byAddr := mon
	byAddr.MonID.MonName = "127.0.0.2"
	copy(byAddr.Priv[:], "sixteen-priv-two")
	smMon(t, s, "127.0.0.1", byAddr)
	smNotify(t, s, "127.0.0.2", "server-q.example", 49)
	lm.expect(t, "server-q.example", 49, "sixteen-priv-two")

	for _, proc := range []uint32{nsm.ProcStat, nsm.ProcMon, nsm.ProcUnmon, nsm.ProcUnmonAll, nsm.ProcNotify} {
		if err := callFrom(t, s, "127.0.0.1", proc, []byte{0, 0, 0, 5}, nil); !errors.Is(err, sunrpc.ErrGarbageArgs) {
			t.Errorf("%s with bad arguments: %v, want GARBAGE_ARGS", nsm.ProcName(proc), err)
		}
	}
}
