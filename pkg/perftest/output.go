package perftest

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as an aligned table, one row per transport,
// and the RDMA/TCP ratios below it.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "test\ttransport\tsize\titers\tdepth\tcrc\tMiB/s\tmsg/s\tp50 µs\tp99 µs\tmean µs\tverified")
	for _, res := range []*Result{&r.RDMA, r.Baseline} {
		if res == nil {
			continue
		}
		crc := "-"
		if res.Transport != "tcp" {
			crc = onOff(res.CRC)
		}
		p50, p99, mean := "-", "-", "-"
		if l := res.Latency; l != nil {
			p50, p99, mean = fmtFloat(l.P50, 2), fmtFloat(l.P99, 2), fmtFloat(l.Mean, 2)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			res.Test, res.Transport, ByteSize(res.SizeBytes), res.Iters, res.Depth, crc,
			fmtFloat(res.MiBPerSec, 1), fmtFloat(res.MsgPerSec, 0), p50, p99, mean, yesNo(res.Verified))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if q := r.Ratio; q != nil {
		if r.RDMA.Latency != nil {
			_, err := fmt.Fprintf(w, "ratio %s/%s: latency p50 %.2fx, p99 %.2fx (below 1: RDMA faster)\n",
				r.RDMA.Transport, r.Baseline.Transport, q.LatencyP50, q.LatencyP99)
			return err
		}
		_, err := fmt.Fprintf(w, "ratio %s/%s: bandwidth %.2fx, messages/s %.2fx (above 1: RDMA faster)\n",
			r.RDMA.Transport, r.Baseline.Transport, q.MiBPerSec, q.MsgPerSec)
		return err
	}
	return nil
}

func fmtFloat(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
