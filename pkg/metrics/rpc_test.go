package metrics_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/exporttest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics/counters"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// The export server's RPC and volume metrics and the NFS client's
// metrics, end to end: our NFS client mounts a volume of our export
// server over TCP, writes and reads; the server's registry and the
// client's are scraped over HTTP and parsed.
func TestRPCServerAndClientMetrics(t *testing.T) {
	e := exporttest.Start(t, exporttest.Options{Quota: 1 << 30})
	ctx := testenv.Context(t, 30*time.Second)

	srvReg := prometheus.NewRegistry()
	rpcm := metrics.NewRPCServer(nil)
	srvReg.MustRegister(rpcm, metrics.NewVolumeCollector(e.Reg.Volumes, nil), counters.NewDRCCollector(e.Srv.DRCStats))
	e.Srv.Dispatcher().SetObserver(rpcm)
	srvURL := metrics.ServeReg(t, srvReg) + "/metrics"

	cliReg := prometheus.NewRegistry()
	rpcc := metrics.NewRPCClient(nil)
	nfsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(e.NFSPort))
	c, err := client.Mount(ctx, client.Options{Server: "127.0.0.1", MountPort: e.MntPort, Export: "/vol",
		Dial: rpcc.Dial(sunrpc.TCPDialer(nfsAddr, sunrpc.TCPOptions{})), Transport: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cliReg.MustRegister(rpcc, metrics.NewClientCollector(c.Stats, nil))
	cliURL := metrics.ServeReg(t, cliReg) + "/metrics"

	s0, c0 := metrics.Scrape(t, nil, srvURL), metrics.Scrape(t, nil, cliURL)
	nfs := func(proc, st string) map[string]string {
		return metrics.L("transport", "tcp", "program", "nfs", "procedure", proc, "status", st)
	}
	if v := metrics.MustValue(t, s0, "nfsrdma_server_rpc_total", metrics.L("transport", "tcp", "program", "mount", "procedure", "MNT", "status", "success")); v != 1 {
		t.Fatalf("MNT calls %v, want 1", v)
	}
	fsinfo0 := metrics.MustValue(t, s0, "nfsrdma_server_rpc_total", nfs("FSINFO", "success"))
	if metrics.Value(s0, "nfsrdma_server_rpc_total", nfs("WRITE", "success")) != -1 {
		t.Fatal("WRITE counted before any write")
	}
	if v := metrics.MustValue(t, s0, "nfsrdma_volume_granted_nodes", metrics.L("volume", "vol")); v != 1 {
		t.Fatalf("granted nodes %v", v)
	}
	if v := metrics.MustValue(t, s0, "nfsrdma_volume_quota_bytes", metrics.L("volume", "vol")); v != 1<<30 {
		t.Fatalf("quota %v", v)
	}
	used0 := metrics.MustValue(t, s0, "nfsrdma_volume_used_bytes", metrics.L("volume", "vol"))
	inodes0 := metrics.MustValue(t, s0, "nfsrdma_volume_used_inodes", metrics.L("volume", "vol"))
	calls0 := metrics.MustValue(t, c0, "nfsrdma_client_rpc_calls_total", nil)

	fh, _, err := c.CreateFile(ctx, c.Root(), "f", 0o644, false)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("metrics!"), 8192) // 64 KiB
	if _, err := c.Write(ctx, fh, 0, data, nfs3.FileSync); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(data))
	if n, _, _, err := c.Read(ctx, fh, 0, buf); err != nil || n != len(data) {
		t.Fatalf("read %d, %v", n, err)
	}
	if _, err := c.Fsinfo(ctx, c.Root()); err != nil {
		t.Fatal(err)
	}

	s1, c1 := metrics.Scrape(t, nil, srvURL), metrics.Scrape(t, nil, cliURL)
	for _, p := range []string{"WRITE", "READ"} {
		if v := metrics.MustValue(t, s1, "nfsrdma_server_rpc_total", nfs(p, "success")); v != 1 {
			t.Errorf("server %s calls %v, want 1", p, v)
		}
		if v := metrics.MustValue(t, s1, "nfsrdma_server_rpc_duration_seconds", metrics.L("transport", "tcp", "program", "nfs", "procedure", p)); v != 1 {
			t.Errorf("server %s latency samples %v, want 1", p, v)
		}
		if v := metrics.MustValue(t, c1, "nfsrdma_client_rpc_transmissions_total", metrics.L("program", "nfs", "procedure", p, "result", "ok")); v != 1 {
			t.Errorf("client %s round trips %v, want 1", p, v)
		}
		if v := metrics.MustValue(t, c1, "nfsrdma_client_rpc_duration_seconds", metrics.L("program", "nfs", "procedure", p)); v != 1 {
			t.Errorf("client %s latency samples %v, want 1", p, v)
		}
	}
	if v := metrics.MustValue(t, s1, "nfsrdma_server_rpc_total", nfs("FSINFO", "success")); v != fsinfo0+1 {
		t.Errorf("FSINFO %v, want %v", v, fsinfo0+1)
	}
	if v := metrics.MustValue(t, c1, "nfsrdma_client_rpc_bytes_total", metrics.L("procedure", "WRITE", "direction", "sent")); v < float64(len(data)) {
		t.Errorf("WRITE bytes sent %v < %d", v, len(data))
	}
	if v := metrics.MustValue(t, c1, "nfsrdma_client_rpc_bytes_total", metrics.L("procedure", "READ", "direction", "received")); v < float64(len(data)) {
		t.Errorf("READ bytes received %v < %d", v, len(data))
	}
	if v := metrics.MustValue(t, c1, "nfsrdma_client_rpc_calls_total", nil); v < calls0+4 {
		t.Errorf("client calls %v, want >= %v", v, calls0+4)
	}
	if v := metrics.MustValue(t, c1, "nfsrdma_client_rpc_retransmits_total", nil); v != 0 {
		t.Errorf("retransmits %v", v)
	}
	// CREATE and WRITE went through the duplicate request cache: executed,
	// kept; no retransmission, no hit.
	if v := metrics.MustValue(t, s1, "nfsrdma_server_drc_calls_total", metrics.L("result", "miss")); v != 2 {
		t.Errorf("DRC misses %v, want 2 (CREATE, WRITE)", v)
	}
	if v := metrics.MustValue(t, s1, "nfsrdma_server_drc_calls_total", metrics.L("result", "hit")); v != 0 {
		t.Errorf("DRC hits %v", v)
	}
	if v := metrics.MustValue(t, s1, "nfsrdma_server_drc_entries", nil); v != 2 {
		t.Errorf("DRC entries %v, want 2", v)
	}
	if v := metrics.MustValue(t, s1, "nfsrdma_volume_used_bytes", metrics.L("volume", "vol")); v < used0+float64(len(data)) {
		t.Errorf("used bytes %v, want >= %v", v, used0+float64(len(data)))
	}
	if v := metrics.MustValue(t, s1, "nfsrdma_volume_used_inodes", metrics.L("volume", "vol")); v != inodes0+1 {
		t.Errorf("used inodes %v, want %v", v, inodes0+1)
	}
	if v := metrics.MustValue(t, s1, "nfsrdma_volumes", nil); v != 1 {
		t.Errorf("volumes %v", v)
	}

	// Errors: garbage arguments, an unknown program (numeric labels).
	raw, err := sunrpc.NewClient(sunrpc.TCPDialer(nfsAddr, sunrpc.TCPOptions{}), sunrpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.Call(ctx, sunrpc.CallSpec{Prog: nfs3.Program, Vers: nfs3.Version, Proc: nfs3.ProcGetattr})
	_ = raw.Call(ctx, sunrpc.CallSpec{Prog: 400123, Vers: 2, Proc: 7})
	s2 := metrics.Scrape(t, nil, srvURL)
	if v := metrics.MustValue(t, s2, "nfsrdma_server_rpc_total", nfs("GETATTR", "garbage_args")); v != 1 {
		t.Errorf("GETATTR garbage_args %v", v)
	}
	if v := metrics.MustValue(t, s2, "nfsrdma_server_rpc_total", metrics.L("program", "400123v2", "procedure", "7", "status", "prog_unavail")); v != 1 {
		t.Errorf("unknown program %v", v)
	}
}

// Observing a known call allocates nothing once its series exist; calls
// of other programs beyond metrics.MaxOtherCalls share one "other" series.
func TestRPCServerObserveCall(t *testing.T) {
	m := metrics.NewRPCServer(prometheus.Labels{"server": "s1"})
	req := &sunrpc.Request{Prog: nfs3.Program, Vers: nfs3.Version, Proc: nfs3.ProcRead, Transport: "rdma"}
	m.ObserveCall(req, sunrpc.StatusSuccess, time.Millisecond)
	if n := testing.AllocsPerRun(1000, func() { m.ObserveCall(req, sunrpc.StatusSuccess, time.Millisecond) }); n != 0 {
		t.Errorf("%v allocations per observation", n)
	}
	for i := range metrics.MaxOtherCalls + 10 {
		m.ObserveCall(&sunrpc.Request{Prog: 500000 + uint32(i), Vers: 1, Transport: "tcp"}, sunrpc.StatusProgUnavail, time.Microsecond)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	fams := metrics.Scrape(t, nil, metrics.ServeReg(t, reg)+"/metrics")
	if v := metrics.MustValue(t, fams, "nfsrdma_server_rpc_total", metrics.L("server", "s1", "transport", "rdma", "program", "nfs", "procedure", "READ", "status", "success")); v != 1002 { // 1 + AllocsPerRun's warm-up + 1000
		t.Errorf("READ %v, want 1002", v)
	}
	if v := metrics.MustValue(t, fams, "nfsrdma_server_rpc_total", metrics.L("program", "other", "procedure", "other", "status", "prog_unavail")); v != 10 {
		t.Errorf("other %v, want 10", v)
	}
	if n := len(fams["nfsrdma_server_rpc_total"].GetMetric()); n != 1+metrics.MaxOtherCalls+1 {
		t.Errorf("%d series, want %d", n, metrics.MaxOtherCalls+2)
	}
}

func TestNames(t *testing.T) {
	for _, c := range []struct {
		prog, vers, proc uint32
		pg, pc           string
	}{
		{100003, 3, 1, "nfs", "GETATTR"}, {100003, 3, 21, "nfs", "COMMIT"}, {100003, 3, 22, "nfs", "22"},
		{100003, 4, 1, "100003v4", "1"}, {100005, 3, 1, "mount", "MNT"}, {100005, 3, 5, "mount", "EXPORT"},
		{100000, 2, 3, "100000v2", "3"},
	} {
		if pg, pc := metrics.ProgramName(c.prog, c.vers), metrics.ProcedureName(c.prog, c.vers, c.proc); pg != c.pg || pc != c.pc {
			t.Errorf("%d/%d/%d: %s %s, want %s %s", c.prog, c.vers, c.proc, pg, pc, c.pg, c.pc)
		}
	}
}

type failingTransport struct{ sunrpc.ClientTransport }

func (failingTransport) RoundTrip(context.Context, *sunrpc.Call) (*sunrpc.Reply, error) {
	return nil, sunrpc.ErrConnLost
}

// metrics.RPCClient counts failed round trips as errors, without latency, and
// calls of other programs as "other"; the hot path does not allocate.
func TestRPCClientErrors(t *testing.T) {
	m := metrics.NewRPCClient(nil)
	dial := m.Dial(func(context.Context) (sunrpc.ClientTransport, error) { return failingTransport{}, nil })
	tr, err := dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	head := func(prog, vers, proc uint32) []byte {
		e := xdr.NewEncoder(nil)
		h := sunrpc.CallHeader{XID: 1, RPCVers: 2, Prog: prog, Vers: vers, Proc: proc}
		h.Encode(e)
		return e.Bytes()
	}
	write := &sunrpc.Call{Msg: sunrpc.Message{Head: head(nfs3.Program, nfs3.Version, nfs3.ProcWrite), Payload: make([]byte, 1000), HasPayload: true}}
	if _, err := tr.RoundTrip(context.Background(), write); !errors.Is(err, sunrpc.ErrConnLost) {
		t.Fatalf("err %v", err)
	}
	if n := testing.AllocsPerRun(100, func() { tr.RoundTrip(context.Background(), write) }); n != 0 {
		t.Errorf("%v allocations per round trip", n)
	}
	tr.RoundTrip(context.Background(), &sunrpc.Call{Msg: sunrpc.Message{Head: head(100000, 2, 3)}})
	tr.RoundTrip(context.Background(), &sunrpc.Call{Msg: sunrpc.Message{Head: []byte{1, 2}}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	f := metrics.Scrape(t, nil, metrics.ServeReg(t, reg)+"/metrics")
	if v := metrics.MustValue(t, f, "nfsrdma_client_rpc_transmissions_total", metrics.L("procedure", "WRITE", "result", "error")); v != 102 {
		t.Errorf("WRITE errors %v, want 102", v)
	}
	if v := metrics.MustValue(t, f, "nfsrdma_client_rpc_bytes_total", metrics.L("procedure", "WRITE", "direction", "sent")); v != 102*float64(write.Msg.Len()) {
		t.Errorf("WRITE bytes sent %v", v)
	}
	if metrics.Value(f, "nfsrdma_client_rpc_duration_seconds", metrics.L("procedure", "WRITE")) > 0 {
		t.Error("latency observed for failed round trips")
	}
	if v := metrics.MustValue(t, f, "nfsrdma_client_rpc_transmissions_total", metrics.L("program", "other", "procedure", "other", "result", "error")); v != 2 {
		t.Errorf("other %v, want 2", v)
	}
}
