package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// NLMCallbackCount is how many lock callbacks of one procedure the
// node's lock callback service received that ended with one result.
type NLMCallbackCount struct {
	Proc   string // "GRANTED", "GRANTED_MSG", "SM_NOTIFY"
	Result string // "granted", "denied", "unrouted", "delivered", "failed"
	N      uint64
}

// NLMCallbackCollector exports the node's lock callback counts, read at
// scrape time:
//
//   - nfsrdma_mounter_nlm_callbacks_total{proc,result}: NLM GRANTED and
//     GRANTED_MSG and NSM SM_NOTIFY calls the mounter received for the
//     node's mounts, by outcome: "granted" (the mount's blocked lock took
//     it), "denied" (no such lock waited), "unrouted" (no mount of the
//     node owns the lock or holds locks on the server), "delivered"
//     (SM_NOTIFY, per mount), "failed" (the mount did not answer).
type NLMCallbackCollector struct {
	counts func() []NLMCallbackCount
	total  *prometheus.Desc
}

// NewNLMCallbackCollector returns a collector of the counts counts
// returns.
func NewNLMCallbackCollector(counts func() []NLMCallbackCount) *NLMCallbackCollector {
	return &NLMCallbackCollector{counts: counts,
		total: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "mounter", "nlm_callbacks_total"),
			"Lock callbacks (NLM GRANTED, GRANTED_MSG, NSM SM_NOTIFY) the node's callback service received, by outcome.", []string{"proc", "result"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *NLMCallbackCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.total }

// Collect implements prometheus.Collector.
func (c *NLMCallbackCollector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.counts() {
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.CounterValue, float64(n.N), n.Proc, n.Result)
	}
}
