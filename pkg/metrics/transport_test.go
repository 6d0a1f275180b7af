package metrics_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics/counters"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

const (
	tProg  = 0x20000078
	tVers  = 1
	pEcho  = 1 // DDP-eligible argument -> the same bytes as a DDP-eligible result
	pSmall = 2 // opaque -> the same opaque, inline
)

func echoHandlers() []sunrpc.Handler {
	return []sunrpc.Handler{
		pEcho: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			d := req.ArgsDecoder()
			b := req.Payload(d, 4<<20)
			if err := d.Err(); err != nil {
				return err
			}
			res.Payload(bytes.Clone(b))
			return nil
		},
		pSmall: func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
			d := req.ArgsDecoder()
			b := d.Opaque(4096)
			if err := d.Err(); err != nil {
				return err
			}
			res.Opaque(b)
			return nil
		},
	}
}

// The transport collectors of both roles over a real RPC-over-RDMA pair
// on software iWARP: calls, replies, credits, chunks and bytes by kind
// grow as calls are made, with the role and const labels; the RPC server
// observer sees transport "rdma".
func TestTransportCollector(t *testing.T) {
	ctx := testenv.Context(t, 60*time.Second)
	rpc := sunrpc.NewServer(nil)
	rpc.Register(tProg, tVers, echoHandlers())
	rpcm := metrics.NewRPCServer(nil)
	rpc.SetObserver(rpcm)
	srv, err := rpcrdma.Listen(ctx, siw.NewDevice(siw.Config{RTRDelay: -1}), "127.0.0.1:0", rpcrdma.ServerOptions{Credits: 8})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, rpc) }()
	defer func() { stop(); <-done; srv.Close() }()

	cm := &rpcrdma.ClientMetrics{}
	cli, err := sunrpc.NewClient(rpcrdma.Dialer(siw.NewDevice(siw.Config{RTRDelay: -1}), srv.Addr().String(),
		rpcrdma.ClientOptions{Credits: 8, Metrics: cm}), sunrpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	// As in the processes: the export server's registry, a mount's.
	srvReg, mountReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	mount := prometheus.Labels{"volume": "pvc-1", "pod": "uid-1"}
	srvReg.MustRegister(counters.NewTransportCollector(counters.RoleResponder, srv.Metrics, nil), rpcm,
		counters.NewConnectionCollector(srv.Connections))
	mountReg.MustRegister(counters.NewTransportCollector(counters.RoleRequester, cm.Metrics, mount), metrics.NewClientCollector(cli.Stats, mount))
	srvURL, mountURL := metrics.ServeReg(t, srvReg)+"/metrics", metrics.ServeReg(t, mountReg)+"/metrics"
	scrapeBoth := func() map[string]*dto.MetricFamily {
		f := metrics.Scrape(t, nil, srvURL)
		for name, mf := range metrics.Scrape(t, nil, mountURL) {
			if f[name] == nil {
				f[name] = mf
			} else {
				f[name].Metric = append(f[name].Metric, mf.Metric...)
			}
		}
		return f
	}
	req := metrics.L("role", "requester", "volume", "pvc-1", "pod", "uid-1")
	resp := metrics.L("role", "responder")
	with := func(base map[string]string, kv ...string) map[string]string {
		m := metrics.L(kv...)
		for k, v := range base {
			m[k] = v
		}
		return m
	}

	if err := cli.Null(ctx, tProg, tVers); err != nil {
		t.Fatal(err)
	}
	f0 := scrapeBoth()
	if v := metrics.MustValue(t, f0, "nfsrdma_rpcrdma_connections", resp); v != 1 {
		t.Errorf("responder connections %v", v)
	}
	if v := metrics.MustValue(t, f0, "nfsrdma_rpcrdma_credits_granted", req); v != 8 {
		t.Errorf("requester credits granted %v, want 8", v)
	}
	if v := metrics.MustValue(t, f0, "nfsrdma_rpcrdma_version", req); v != 2 {
		t.Errorf("requester version %v, want 2 (negotiated with our responder)", v)
	}
	if v := metrics.MustValue(t, f0, "nfsrdma_rpcrdma_credits_in_use", req); v != 0 {
		t.Errorf("credits in use %v", v)
	}
	if v := metrics.MustValue(t, f0, "nfsrdma_rpcrdma_registered_bytes", resp); v <= 0 {
		t.Errorf("registered bytes %v", v)
	}
	// Per connection: the machine name is "" (the Null call has AUTH_NONE).
	peer := srv.Connections()[0].Peer
	if v := metrics.MustValue(t, f0, "nfsrdma_rpcrdma_connection_credits_granted", metrics.L("machine", "", "peer", peer, "version", "2")); v != 8 {
		t.Errorf("connection credits granted %v, want 8", v)
	}
	if v := metrics.MustValue(t, f0, "nfsrdma_rpcrdma_connection_receives_posted", metrics.L("machine", "", "peer", peer, "version", "2")); v != 8 {
		t.Errorf("connection receives posted %v, want 8", v)
	}
	if v := metrics.MustValue(t, f0, "nfsrdma_rpcrdma_connection_credits_target", metrics.L("machine", "", "peer", peer, "version", "2", "named", "false")); v != 8 {
		t.Errorf("connection credits target %v, want 8", v)
	}
	calls0 := metrics.MustValue(t, f0, "nfsrdma_rpcrdma_calls_total", req)
	readBytes0 := metrics.MustValue(t, f0, "nfsrdma_rpcrdma_bytes_total", with(resp, "kind", "read"))
	writeChunks0 := metrics.MustValue(t, f0, "nfsrdma_rpcrdma_chunks_total", with(req, "kind", "write"))

	small := []byte("hello")
	if err := cli.Call(ctx, sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pSmall,
		Args: func(b *sunrpc.Builder) { b.Opaque(small) }}); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{0xa5}, 256<<10)
	got := make([]byte, len(big))
	placed := -1
	if err := cli.Call(ctx, sunrpc.CallSpec{Prog: tProg, Vers: tVers, Proc: pEcho,
		Args:         func(b *sunrpc.Builder) { b.Payload(big) },
		Results:      func(d *xdr.Decoder, pl int) error { placed = pl; return nil },
		ReplyPayload: got, MaxReplySize: 512}); err != nil {
		t.Fatal(err)
	}
	if placed != len(big) || !bytes.Equal(got, big) {
		t.Fatalf("placed %d", placed)
	}

	f1 := scrapeBoth()
	if v := metrics.MustValue(t, f1, "nfsrdma_rpcrdma_calls_total", req); v != calls0+2 {
		t.Errorf("requester calls %v, want %v", v, calls0+2)
	}
	if v := metrics.MustValue(t, f1, "nfsrdma_rpcrdma_replies_total", resp); v != calls0+2 {
		t.Errorf("responder replies %v, want %v", v, calls0+2)
	}
	if v := metrics.MustValue(t, f1, "nfsrdma_rpcrdma_bytes_total", with(resp, "kind", "read")); v-readBytes0 != float64(len(big)) {
		t.Errorf("responder read-chunk bytes grew by %v, want %d", v-readBytes0, len(big))
	}
	if v := metrics.MustValue(t, f1, "nfsrdma_rpcrdma_chunks_total", with(req, "kind", "write")); v != writeChunks0+1 {
		t.Errorf("requester write chunks %v, want %v", v, writeChunks0+1)
	}
	if v := metrics.MustValue(t, f1, "nfsrdma_rpcrdma_bytes_total", with(resp, "kind", "write")); v < float64(len(big)) {
		t.Errorf("responder write-chunk bytes %v", v)
	}
	if v := metrics.MustValue(t, f1, "nfsrdma_rpcrdma_bytes_total", with(req, "kind", "inline")); v <= 0 {
		t.Errorf("inline bytes %v", v)
	}
	for _, code := range []string{"ERR_VERS", "ERR_CHUNK"} {
		if v := metrics.MustValue(t, f1, "nfsrdma_rpcrdma_errors_total", with(resp, "code", code)); v != 0 {
			t.Errorf("%s %v", code, v)
		}
	}
	if v := metrics.MustValue(t, f1, "nfsrdma_client_rpc_calls_total", mount); v != 3 {
		t.Errorf("client calls %v, want 3", v)
	}
	if v := metrics.MustValue(t, f1, "nfsrdma_server_rpc_total", metrics.L("transport", "rdma", "program", fmt.Sprintf("%dv%d", tProg, tVers), "procedure", "1", "status", "success")); v != 1 {
		t.Errorf("server rpc over rdma %v", v)
	}
	if n := len(f1["nfsrdma_rpcrdma_calls_total"].GetMetric()); n != 2 {
		t.Errorf("%d calls_total series, want one per role", n)
	}
}
