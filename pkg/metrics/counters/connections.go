package counters

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
)

// ConnectionCollector exports the credits of each RPC-over-RDMA connection
// of a responder (rpcrdma.ConnInfo, Server.Connections), read at scrape time, one
// series per connection labelled with its AUTH_SYS machine name (the pod's
// mount: "NODE/NAMESPACE/POD"), peer address and RPC-over-RDMA version
// ("1", "2", or "0" before the connection's first message):
//
//   - nfsrdma_rpcrdma_connection_credits_granted: the credits its replies
//     carry (RFC 8166 section 3.3.1), after the receive budget;
//   - nfsrdma_rpcrdma_connection_credits_target: its grant before the
//     budget (its machine's grant, or the default), label named="true"
//     when the machine has a grant of its own;
//   - nfsrdma_rpcrdma_connection_receives_posted: receives posted;
//   - nfsrdma_rpcrdma_connection_calls_in_process: calls received and not
//     yet answered.
type ConnectionCollector struct {
	conns                              func() []rpcrdma.ConnInfo
	granted, target, posted, inProcess *prometheus.Desc
}

// NewConnectionCollector returns a collector of the connections conns
// returns (the export server's RPC-over-RDMA connections).
func NewConnectionCollector(conns func() []rpcrdma.ConnInfo) *ConnectionCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "rpcrdma", name), help, append([]string{"machine", "peer", "version"}, labels...), nil)
	}
	return &ConnectionCollector{
		conns:     conns,
		granted:   d("connection_credits_granted", "RPC-over-RDMA credits a responder connection's replies carry now."),
		target:    d("connection_credits_target", "A responder connection's grant before the receive budget: its machine's grant (named) or the default.", "named"),
		posted:    d("connection_receives_posted", "Receives a responder connection has posted."),
		inProcess: d("connection_calls_in_process", "Calls a responder connection received and has not answered yet."),
	}
}

// Describe implements prometheus.Collector.
func (c *ConnectionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.granted, c.target, c.posted, c.inProcess} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *ConnectionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, ci := range c.conns() {
		g := func(d *prometheus.Desc, v int, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), append([]string{ci.Machine, ci.Peer, strconv.Itoa(ci.Version)}, extra...)...)
		}
		named := "false"
		if ci.Named {
			named = "true"
		}
		g(c.granted, ci.Grant)
		g(c.target, ci.Target, named)
		g(c.posted, ci.Posted)
		g(c.inProcess, ci.InProcess)
	}
}
