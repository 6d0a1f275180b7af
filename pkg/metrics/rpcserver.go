package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// RPCServer is the export server's RPC metrics, a sunrpc.Observer (install
// it with sunrpc.Server.SetObserver) and a prometheus.Collector
// (register it):
//
//   - nfsrdma_server_rpc_total{transport,program,procedure,status}: calls
//     answered (or dropped), by sunrpc.CallStatus ("success",
//     "garbage_args", "auth_error", "dropped", ...);
//   - nfsrdma_server_rpc_duration_seconds{transport,program,procedure}:
//     time to decode, run and encode a call (the transport's receive and
//     send not included), histogram over LatencyBuckets.
//
// transport is "tcp" or "rdma"; program and procedure are as ProgramName
// and ProcedureName; calls of other programs keep numeric labels for the
// first MaxOtherCalls distinct (program, version, procedure), then are
// counted as program="other", procedure="other" (a peer sending random
// numbers cannot grow the series without bound). Observing an NFSv3 or MOUNT v3 call over TCP or RDMA
// does not allocate once its series exist.
type RPCServer struct {
	calls *prometheus.CounterVec
	dur   *prometheus.HistogramVec
	cache [numTransports][numKnownProcs]rpcCell

	mu    sync.Mutex
	other map[[3]uint32]bool // distinct calls observed in slow
}

// MaxOtherCalls bounds the distinct (program, version, procedure) label
// sets of calls other than NFSv3 and MOUNT v3 in RPCServer.
const MaxOtherCalls = 64

// rpcCell caches the series of one transport and procedure.
type rpcCell struct {
	dur   atomic.Pointer[observerBox]
	calls [sunrpc.NumCallStatus]atomic.Pointer[counterBox]
}

type observerBox struct{ o prometheus.Observer }
type counterBox struct{ c prometheus.Counter }

var rpcServerLabels = []string{"transport", "program", "procedure"}

// NewRPCServer returns the export server's RPC metrics, with constLabels
// on every series (nil: none).
func NewRPCServer(constLabels prometheus.Labels) *RPCServer {
	return &RPCServer{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "server", Name: "rpc_total",
			Help:        "RPC calls the export server answered or dropped, by transport, program, procedure and RPC status.",
			ConstLabels: constLabels,
		}, append(rpcServerLabels[:3:3], "status")),
		dur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "server", Name: "rpc_duration_seconds",
			Help:        "Time the export server took to decode, execute and encode an RPC call, in seconds (transport receive and send excluded).",
			ConstLabels: constLabels,
			Buckets:     LatencyBuckets,
		}, rpcServerLabels),
	}
}

// ObserveCall implements sunrpc.Observer.
func (m *RPCServer) ObserveCall(req *sunrpc.Request, st sunrpc.CallStatus, d time.Duration) {
	ti, ok1 := transportIndex(req.Transport)
	pi, ok2 := knownProc(req.Prog, req.Vers, req.Proc)
	if !ok1 || !ok2 || st >= sunrpc.NumCallStatus {
		m.slow(req, st, d)
		return
	}
	c := &m.cache[ti][pi]
	o := c.dur.Load()
	if o == nil {
		o = &observerBox{m.dur.WithLabelValues(req.Transport, ProgramName(req.Prog, req.Vers), ProcedureName(req.Prog, req.Vers, req.Proc))}
		c.dur.Store(o)
	}
	o.o.Observe(d.Seconds())
	k := c.calls[st].Load()
	if k == nil {
		k = &counterBox{m.calls.WithLabelValues(req.Transport, ProgramName(req.Prog, req.Vers), ProcedureName(req.Prog, req.Vers, req.Proc), st.String())}
		c.calls[st].Store(k)
	}
	k.c.Inc()
}

// slow observes a call outside the caches (another program or transport).
func (m *RPCServer) slow(req *sunrpc.Request, st sunrpc.CallStatus, d time.Duration) {
	tr := req.Transport
	if tr == "" {
		tr = "unknown"
	}
	prog, proc := "other", "other"
	key := [3]uint32{req.Prog, req.Vers, req.Proc}
	m.mu.Lock()
	if m.other == nil {
		m.other = map[[3]uint32]bool{}
	}
	if m.other[key] || len(m.other) < MaxOtherCalls {
		m.other[key] = true
		prog, proc = ProgramName(req.Prog, req.Vers), ProcedureName(req.Prog, req.Vers, req.Proc)
	}
	m.mu.Unlock()
	m.dur.WithLabelValues(tr, prog, proc).Observe(d.Seconds())
	m.calls.WithLabelValues(tr, prog, proc, st.String()).Inc()
}

// Describe implements prometheus.Collector.
func (m *RPCServer) Describe(ch chan<- *prometheus.Desc) {
	m.calls.Describe(ch)
	m.dur.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *RPCServer) Collect(ch chan<- prometheus.Metric) {
	m.calls.Collect(ch)
	m.dur.Collect(ch)
}
