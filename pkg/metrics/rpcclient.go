package metrics

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// RPCClient is per-procedure metrics of an NFS client (a mount), taken
// by wrapping its transports (Dial), and a prometheus.Collector:
//
//   - nfsrdma_client_rpc_transmissions_total{program,procedure,result}:
//     round trips by result, "ok" (a reply came) or "error" (connection
//     lost, timeout, context ended); a retransmission is a round trip;
//   - nfsrdma_client_rpc_duration_seconds{program,procedure}: time from
//     sending a call to its reply (round trips with a reply), histogram
//     over LatencyBuckets;
//   - nfsrdma_client_rpc_bytes_total{program,procedure,direction}: RPC
//     bytes "sent" (calls, DDP-eligible data included) and "received"
//     (replies, placed data included).
//
// program and procedure are as ProgramName and ProcedureName, with
// calls of other programs counted as "other". Observing an NFSv3 or
// MOUNT v3 round trip does not allocate once its series exist.
type RPCClient struct {
	trans *prometheus.CounterVec
	dur   *prometheus.HistogramVec
	bytes *prometheus.CounterVec
	cache [numKnownProcs + 1]atomic.Pointer[clientCell] // last: other
}

type clientCell struct {
	ok, fail, sent, recv prometheus.Counter
	dur                  prometheus.Observer
}

// NewRPCClient returns NFS client metrics with constLabels on every
// series (nil: none; the node's MountCollector adds volume and pod).
func NewRPCClient(constLabels prometheus.Labels) *RPCClient {
	return &RPCClient{
		trans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "client", Name: "rpc_transmissions_total",
			Help:        "RPC round trips of the NFS client, by program, procedure and result (ok: a reply came; error: none).",
			ConstLabels: constLabels,
		}, []string{"program", "procedure", "result"}),
		dur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "client", Name: "rpc_duration_seconds",
			Help:        "Time from sending an RPC call to receiving its reply, in seconds, by program and procedure.",
			ConstLabels: constLabels,
			Buckets:     LatencyBuckets,
		}, []string{"program", "procedure"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "client", Name: "rpc_bytes_total",
			Help:        "RPC bytes of the NFS client, by program, procedure and direction (sent: calls; received: replies, placed data included).",
			ConstLabels: constLabels,
		}, []string{"program", "procedure", "direction"}),
	}
}

// Dial wraps dial so that every transport it opens is observed.
func (m *RPCClient) Dial(dial sunrpc.DialFunc) sunrpc.DialFunc {
	return func(ctx context.Context) (sunrpc.ClientTransport, error) {
		t, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		return &observedTransport{ClientTransport: t, m: m}, nil
	}
}

// cell returns the series of the call whose message head is head.
func (m *RPCClient) cell(head []byte) *clientCell {
	var prog, vers, proc uint32
	if len(head) >= 24 { // xid, msg_type, rpcvers, prog, vers, proc (RFC 5531 section 9)
		prog, vers, proc = binary.BigEndian.Uint32(head[12:]), binary.BigEndian.Uint32(head[16:]), binary.BigEndian.Uint32(head[20:])
	}
	i, ok := knownProc(prog, vers, proc)
	if !ok {
		i = numKnownProcs
	}
	if c := m.cache[i].Load(); c != nil {
		return c
	}
	pg, pc := "other", "other"
	if ok {
		pg, pc = ProgramName(prog, vers), ProcedureName(prog, vers, proc)
	}
	c := &clientCell{
		ok: m.trans.WithLabelValues(pg, pc, "ok"), fail: m.trans.WithLabelValues(pg, pc, "error"),
		sent: m.bytes.WithLabelValues(pg, pc, "sent"), recv: m.bytes.WithLabelValues(pg, pc, "received"),
		dur: m.dur.WithLabelValues(pg, pc),
	}
	m.cache[i].Store(c)
	return c
}

// Describe implements prometheus.Collector.
func (m *RPCClient) Describe(ch chan<- *prometheus.Desc) {
	m.trans.Describe(ch)
	m.dur.Describe(ch)
	m.bytes.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *RPCClient) Collect(ch chan<- prometheus.Metric) {
	m.trans.Collect(ch)
	m.dur.Collect(ch)
	m.bytes.Collect(ch)
}

// observedTransport is a ClientTransport whose round trips RPCClient
// observes.
type observedTransport struct {
	sunrpc.ClientTransport
	m *RPCClient
}

func (t *observedTransport) RoundTrip(ctx context.Context, c *sunrpc.Call) (*sunrpc.Reply, error) {
	cell := t.m.cell(c.Msg.Head)
	start := time.Now()
	r, err := t.ClientTransport.RoundTrip(ctx, c)
	d := time.Since(start)
	cell.sent.Add(float64(c.Msg.Len()))
	if err != nil {
		cell.fail.Inc()
		return r, err
	}
	cell.ok.Inc()
	cell.dur.Observe(d.Seconds())
	cell.recv.Add(float64(len(r.Body) + max(r.Placed, 0)))
	return r, nil
}
