package perftest

import (
	"slices"
	"time"
)

// Result is the measurement of one transport.
type Result struct {
	Test Test `json:"test"`
	// Transport is "siw" (software iWARP) or "tcp" (the raw TCP baseline).
	Transport string `json:"transport"`
	// SizeBytes is the message size, bytes.
	SizeBytes int64 `json:"size_bytes"`
	// Iters is the number of messages (round trips for send_lat).
	Iters int `json:"iters"`
	// Depth is the number of requests kept outstanding (1 for TCP: one
	// stream).
	Depth int `json:"depth"`
	// CRC says whether MPA CRC32c was on (siw only).
	CRC bool `json:"crc"`
	// Verified says whether the sink was checked against the pattern.
	Verified bool `json:"verified"`
	// Seconds is the duration of the measured data phase, seconds.
	Seconds float64 `json:"seconds"`
	// MiBPerSec is the payload bandwidth, MiB (2^20 bytes) per second; for
	// send_lat, one direction.
	MiBPerSec float64 `json:"bw_mib_per_s"`
	// MsgPerSec is the message rate, messages per second (round trips per
	// second for send_lat).
	MsgPerSec float64 `json:"msg_per_s"`
	// Latency is set for send_lat.
	Latency *Latency `json:"latency_us,omitempty"`
}

// Latency summarises one-way latencies, microseconds: each is half a
// measured round trip, as ib_send_lat reports.
type Latency struct {
	Min  float64 `json:"min"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

// Ratio compares RDMA with the TCP baseline: RDMA value / TCP value. For
// bandwidth and message rate above 1 means RDMA is faster; for latency
// below 1 means RDMA is faster.
type Ratio struct {
	MiBPerSec  float64 `json:"bw"`
	MsgPerSec  float64 `json:"msg_rate"`
	LatencyP50 float64 `json:"latency_p50,omitempty"`
	LatencyP99 float64 `json:"latency_p99,omitempty"`
}

// Report is the outcome of a run: the RDMA result and, when asked for, the
// baseline and the ratio between them.
type Report struct {
	RDMA     Result  `json:"rdma"`
	Baseline *Result `json:"baseline,omitempty"`
	Ratio    *Ratio  `json:"ratio,omitempty"`
}

// setRate fills the bandwidth and message rate for a data phase of elapsed.
func (r *Result) setRate(elapsed time.Duration) {
	r.Seconds = elapsed.Seconds()
	if r.Seconds <= 0 {
		return
	}
	r.MiBPerSec = float64(r.SizeBytes) * float64(r.Iters) / (1 << 20) / r.Seconds
	r.MsgPerSec = float64(r.Iters) / r.Seconds
}

// latency summarises round-trip times as one-way latencies (µs). It sorts
// rtts.
func latency(rtts []time.Duration) *Latency {
	if len(rtts) == 0 {
		return nil
	}
	slices.Sort(rtts)
	us := func(d time.Duration) float64 { return float64(d) / 2 / float64(time.Microsecond) }
	var sum time.Duration
	for _, d := range rtts {
		sum += d
	}
	return &Latency{
		Min:  us(rtts[0]),
		P50:  us(percentile(rtts, 50)),
		P99:  us(percentile(rtts, 99)),
		Mean: us(sum / time.Duration(len(rtts))),
		Max:  us(rtts[len(rtts)-1]),
	}
}

// percentile returns the p-th percentile (nearest rank) of sorted values.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

// compare computes the ratio RDMA/baseline.
func compare(rdma, base *Result) *Ratio {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	r := &Ratio{MiBPerSec: div(rdma.MiBPerSec, base.MiBPerSec), MsgPerSec: div(rdma.MsgPerSec, base.MsgPerSec)}
	if rdma.Latency != nil && base.Latency != nil {
		r.LatencyP50 = div(rdma.Latency.P50, base.Latency.P50)
		r.LatencyP99 = div(rdma.Latency.P99, base.Latency.P99)
	}
	return r
}
