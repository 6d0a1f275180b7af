package counters

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
)

// Roles of a TransportCollector (the "role" label).
const (
	RoleRequester = "requester" // an NFS client's transport
	RoleResponder = "responder" // the export server's transport
)

// TransportCollector exports the counters of one RPC-over-RDMA endpoint
// (rpcrdma.Metrics), read at scrape time, with a "role" label and the
// const labels given:
//
//   - nfsrdma_rpcrdma_connections: connections open (gauge);
//   - nfsrdma_rpcrdma_calls_total, _replies_total: calls sent (requester)
//     or received (responder), replies received or sent;
//   - nfsrdma_rpcrdma_retransmits_total: responder: calls whose XID was
//     seen recently;
//   - nfsrdma_rpcrdma_dropped_replies_total{reason="unmatched"|"bad"}:
//     requester: replies dropped;
//   - nfsrdma_rpcrdma_credits_granted: requester: the last credit grant
//     received; responder: the grants of all connections added up (gauge;
//     per connection: ConnectionCollector); nfsrdma_rpcrdma_credits_in_use:
//     calls holding a credit (gauge);
//   - nfsrdma_rpcrdma_chunks_total{kind}: messages by kind: "inline",
//     "read", "position_zero", "write", "reply" (RFC 8166 section 3.4),
//     "reply_read", "send_ddp" (calls and replies placed by send-based DDP);
//   - nfsrdma_rpcrdma_bytes_total{kind}: RPC bytes by how they moved:
//     "inline" (in Sends), "read" (RDMA Read of Read chunks), "write" (RDMA
//     Write into Write chunks), "reply" (into Reply chunks), "send_ddp"
//     (placed by send-based DDP inside Sends);
//   - nfsrdma_rpcrdma_errors_total{code="ERR_VERS"|"ERR_CHUNK"|"RDMA2_ERR_*"}:
//     RDMA_ERROR and RDMA2_ERROR replies sent (responder) or received
//     (requester), and Transmit Errors (RDMA2_XMTERR); RDMA2_ERR_VERS is
//     counted as ERR_VERS;
//   - nfsrdma_rpcrdma_version: requester: the RPC-over-RDMA version of its
//     latest connection (gauge; 1 after a fallback from version 2);
//     nfsrdma_rpcrdma_version1_fallbacks_total: connections that fell
//     back to version 1; nfsrdma_rpcrdma_grants_total: RDMA2_GRANT
//     messages received;
//   - nfsrdma_rpcrdma_send_ddp_groups_total: of the send_ddp messages,
//     those sent or received as a transmission group of several Sends;
//     nfsrdma_rpcrdma_send_ddp_kept_total: requester: results received by
//     send-based DDP and handed on from the receive buffers, not copied;
//   - nfsrdma_rpcrdma_send_with_invalidate_total: replies sent or received
//     with Send With Invalidate;
//   - nfsrdma_rpcrdma_registrations: per-call memory registrations alive
//     (gauge); nfsrdma_rpcrdma_registered_bytes: all registered memory, in
//     bytes (gauge).
type TransportCollector struct {
	metrics func() rpcrdma.Metrics

	connections, creditsGranted, creditsInUse, registrations, registeredBytes *prometheus.Desc
	calls, replies, retransmits, dropped, chunks, bytes, errors, sendInv      *prometheus.Desc
	version, fallbacks, grants                                                *prometheus.Desc
	pullDone, readChunkTimeouts                                               *prometheus.Desc
	sddpGroups, sddpKept                                                      *prometheus.Desc
}

// NewTransportCollector returns a collector of the snapshots stats
// returns (an RPC-over-RDMA server's or client's counters), labelled role (RoleRequester or
// RoleResponder) and constLabels (e.g. volume and pod of a mount). The
// TransportCollectors of one registry must have the same const label
// names (the registry refuses a metric name with two label sets).
func NewTransportCollector(role string, stats func() rpcrdma.Metrics, constLabels prometheus.Labels) *TransportCollector {
	cl := prometheus.Labels{"role": role}
	for k, v := range constLabels {
		cl[k] = v
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "rpcrdma", name), help, labels, cl)
	}
	return &TransportCollector{
		metrics:           stats,
		connections:       d("connections", "RPC-over-RDMA connections open."),
		calls:             d("calls_total", "RPC calls sent (requester) or received (responder) over RPC-over-RDMA."),
		replies:           d("replies_total", "RPC replies received (requester) or sent (responder) over RPC-over-RDMA."),
		retransmits:       d("retransmits_total", "Responder: calls whose XID was seen recently (retransmissions)."),
		dropped:           d("dropped_replies_total", "Requester: replies dropped, because their XID matched no call (unmatched) or they failed to decode (bad).", "reason"),
		creditsGranted:    d("credits_granted", "RPC-over-RDMA credits: the last grant received (requester), or the grants of all connections added up (responder)."),
		creditsInUse:      d("credits_in_use", "Calls holding an RPC-over-RDMA credit now."),
		chunks:            d("chunks_total", "RPC-over-RDMA messages by chunk kind (inline, read, position_zero, write, reply, reply_read: replies in responder-provided Read chunks; send_ddp: calls and replies whose DDP-eligible item was placed by send-based DDP).", "kind"),
		bytes:             d("bytes_total", "RPC bytes moved over RPC-over-RDMA, by kind: inline in Sends, read (RDMA Read of Read chunks), write (RDMA Write into Write chunks), reply (into Reply chunks), send_ddp (placed by send-based DDP inside Sends).", "kind"),
		errors:            d("errors_total", "RDMA_ERROR replies sent (responder) or received (requester), by code.", "code"),
		sendInv:           d("send_with_invalidate_total", "Replies sent (responder) or received (requester) with Send With Invalidate."),
		registrations:     d("registrations", "Per-call memory registrations alive now."),
		registeredBytes:   d("registered_bytes", "Memory registered for RDMA, in bytes: buffer pools, chunk buffers and per-call registrations."),
		version:           d("version", "Requester: the RPC-over-RDMA version of the latest connection (1 or 2; 0 before any)."),
		fallbacks:         d("version1_fallbacks_total", "Requester: connections on which the server answered version 2 with ERR_VERS and version 1 was used."),
		grants:            d("grants_total", "RDMA2_GRANT messages received (requester) or sent (responder)."),
		pullDone:          d("pull_done_total", "Pull completion notifications of responder-provided Read chunks: sent (requester), or received and matched or dropped (responder).", "outcome"),
		readChunkTimeouts: d("read_chunk_timeouts_total", "Responder: Read chunks of replies invalidated after the timeout with no pull completion notification."),
		sddpGroups:        d("send_ddp_groups_total", "Calls and replies placed by send-based DDP as a transmission group of several Sends (of chunks_total{kind=\"send_ddp\"})."),
		sddpKept:          d("send_ddp_kept_total", "Requester: results received by send-based DDP and handed on from the receive buffers, not copied."),
	}
}

// Describe implements prometheus.Collector.
func (c *TransportCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.connections, c.calls, c.replies, c.retransmits, c.dropped,
		c.creditsGranted, c.creditsInUse, c.chunks, c.bytes, c.errors, c.sendInv, c.registrations, c.registeredBytes,
		c.version, c.fallbacks, c.grants, c.pullDone, c.readChunkTimeouts, c.sddpGroups, c.sddpKept} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *TransportCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.metrics()
	g := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	n := func(d *prometheus.Desc, v uint64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	g(c.connections, float64(m.Connections))
	n(c.calls, m.Calls)
	n(c.replies, m.Replies)
	n(c.retransmits, m.Retransmits)
	n(c.dropped, m.UnmatchedReplies, "unmatched")
	n(c.dropped, m.BadReplies, "bad")
	g(c.creditsGranted, float64(m.CreditsGranted))
	g(c.creditsInUse, float64(m.CreditsInUse))
	n(c.chunks, m.InlineMsgs, "inline")
	n(c.chunks, m.ReadChunks, "read")
	n(c.chunks, m.PositionZeroChunks, "position_zero")
	n(c.chunks, m.WriteChunks, "write")
	n(c.chunks, m.ReplyChunks, "reply")
	n(c.chunks, m.ReplyReadChunks, "reply_read")
	n(c.chunks, m.SendDDPMsgs, "send_ddp")
	n(c.bytes, m.InlineBytes, "inline")
	n(c.bytes, m.ReadChunkBytes, "read")
	n(c.bytes, m.WriteChunkBytes, "write")
	n(c.bytes, m.ReplyChunkBytes, "reply")
	n(c.bytes, m.ReplyReadBytes, "reply_read")
	n(c.bytes, m.SendDDPBytes, "send_ddp")
	n(c.errors, m.XmitErrors, "RDMA2_XMTERR")
	n(c.sddpGroups, m.SendDDPGroups)
	n(c.sddpKept, m.SendDDPKept)
	n(c.errors, m.ErrVers, "ERR_VERS")
	n(c.errors, m.ErrChunk, "ERR_CHUNK")
	for code, v := range m.Errors2 {
		if code != rpcrdma.Err2Vers {
			n(c.errors, v, code.String())
		}
	}
	g(c.version, float64(m.Version))
	n(c.fallbacks, m.Version1Fallbacks)
	n(c.grants, m.Grants)
	n(c.pullDone, m.PullDone, "matched")
	n(c.pullDone, m.PullDoneDropped, "dropped")
	n(c.readChunkTimeouts, m.ReadChunkTimeouts)
	n(c.sendInv, m.SendWithInvalidate)
	g(c.registrations, float64(m.Registrations))
	g(c.registeredBytes, float64(m.RegisteredBytes))
}
