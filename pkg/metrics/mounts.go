package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
)

// MountTarget is one mount process whose metrics a MountCollector fetches.
type MountTarget struct {
	// Socket is the unix socket the process serves its metrics on
	// (ServeUnix).
	Socket string
	// Labels are set on every metric fetched from it, replacing labels of
	// the same name (e.g. {"volume": ..., "pod": ...}). They identify the
	// mount: two targets with the same Labels clash (the second one's
	// metrics are dropped from the scrape, and the error logged).
	Labels prometheus.Labels
}

// Defaults of MountCollector.
const (
	// DefaultMountTimeout bounds the fetch of one mount's metrics.
	DefaultMountTimeout = 2 * time.Second
	// DefaultMountParallel is how many mounts are fetched at once.
	DefaultMountParallel = 8
	// maxMountBody bounds one mount's metrics, in bytes.
	maxMountBody = 16 << 20
)

// MountCollector re-exposes, at scrape time, the metrics of a node's mount
// processes: for every MountTarget that targets lists, it fetches
// /metrics from the target's unix socket (bounded by Timeout), keeps the
// families named nfsrdma_* (so that a process's go_* and process_* do not
// clash with the node's own), and adds the target's Labels. It also
// exports, per target (labelled with its Labels):
//
//   - nfsrdma_mount_scrape_up: 1 when the fetch succeeded, else 0;
//   - nfsrdma_mount_scrape_duration_seconds: how long the fetch took.
//
// It is an unchecked collector (its Describe sends nothing): the metric
// names and labels come from the processes. Collect may run concurrently.
type MountCollector struct {
	// Timeout bounds the fetch of one target [DefaultMountTimeout].
	Timeout time.Duration
	// Parallel is how many targets are fetched at once [DefaultMountParallel].
	Parallel int

	targets func(ctx context.Context) ([]MountTarget, error)
	client  *http.Client
}

type socketKey struct{}

// NewMountCollector returns a collector of the targets that targets
// returns at each scrape (e.g. from mounter.Client.List), called with a
// context bounded by the collector's Timeout.
func NewMountCollector(targets func(ctx context.Context) ([]MountTarget, error)) *MountCollector {
	tr := &http.Transport{
		// Each request goes to the socket in its context; never reuse a
		// connection for another target.
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			path, _ := ctx.Value(socketKey{}).(string)
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}
	return &MountCollector{targets: targets, client: &http.Client{Transport: tr}}
}

var (
	mountListDesc = prometheus.NewDesc(Namespace+"_mount_list_errors", "The list of mounts could not be read.", nil, nil)
	// acceptProto asks for the lossless delimited protobuf format.
	acceptProto = string(expfmt.NewFormat(expfmt.TypeProtoDelim))
)

// Describe implements prometheus.Collector; it sends nothing (unchecked).
func (c *MountCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *MountCollector) Collect(ch chan<- prometheus.Metric) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultMountTimeout
	}
	par := c.Parallel
	if par <= 0 {
		par = DefaultMountParallel
	}
	lctx, cancel := context.WithTimeout(context.Background(), timeout)
	targets, err := c.targets(lctx)
	cancel()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(mountListDesc, fmt.Errorf("metrics: listing mounts: %w", err))
		return
	}
	type result struct {
		fams []*dto.MetricFamily
		took time.Duration
		err  error
	}
	res := make([]result, len(targets))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, t := range targets {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			start := time.Now()
			fams, err := c.fetch(t.Socket, timeout)
			res[i] = result{fams, time.Since(start), err}
		})
	}
	wg.Wait()

	help := map[string]string{} // first help seen per name: the registry wants one
	for i, t := range targets {
		r := res[i]
		names, values := labelPairs(t.Labels)
		up := 1.0
		if r.err != nil {
			up = 0
			klog.V(2).InfoS("metrics: fetching a mount's metrics", "socket", t.Socket, "labels", t.Labels, "err", r.err)
		}
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(Namespace+"_mount_scrape_up",
			"Whether the last fetch of the mount process's metrics succeeded (1) or not (0).", names, nil), prometheus.GaugeValue, up, values...)
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(Namespace+"_mount_scrape_duration_seconds",
			"How long the fetch of the mount process's metrics took, in seconds.", names, nil), prometheus.GaugeValue, r.took.Seconds(), values...)
		for _, f := range r.fams {
			name := f.GetName()
			h, ok := help[name]
			if !ok {
				h = f.GetHelp()
				help[name] = h
			}
			desc := prometheus.NewDesc(name, h, nil, nil)
			for _, m := range f.GetMetric() {
				ch <- &fetchedMetric{desc: desc, m: m, labels: mergeLabels(m.GetLabel(), t.Labels)}
			}
		}
	}
}

// fetch gets the nfsrdma_* families a mount process serves on socket.
func (c *MountCollector) fetch(socket string, timeout time.Duration) ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), socketKey{}, socket), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://mount/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", acceptProto)
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s: HTTP %s", socket, resp.Status)
	}
	dec := expfmt.NewDecoder(io.LimitReader(resp.Body, maxMountBody), expfmt.ResponseFormat(resp.Header))
	var out []*dto.MetricFamily
	for {
		f := &dto.MetricFamily{}
		if err := dec.Decode(f); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("metrics: %s: %w", socket, err)
		}
		if strings.HasPrefix(f.GetName(), Namespace+"_") && len(f.GetMetric()) > 0 {
			out = append(out, f)
		}
	}
}

// labelPairs returns l's names, sorted, and their values.
func labelPairs(l prometheus.Labels) (names, values []string) {
	for k := range l {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		values = append(values, l[k])
	}
	return names, values
}

// mergeLabels returns have with extra added, extra winning, sorted by name.
func mergeLabels(have []*dto.LabelPair, extra prometheus.Labels) []*dto.LabelPair {
	out := make([]*dto.LabelPair, 0, len(have)+len(extra))
	for _, p := range have {
		if _, ok := extra[p.GetName()]; !ok {
			out = append(out, p)
		}
	}
	for k, v := range extra {
		out = append(out, &dto.LabelPair{Name: proto.String(k), Value: proto.String(v)})
	}
	slices.SortFunc(out, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

// fetchedMetric is a metric fetched from a mount process.
type fetchedMetric struct {
	desc   *prometheus.Desc
	m      *dto.Metric
	labels []*dto.LabelPair
}

func (f *fetchedMetric) Desc() *prometheus.Desc { return f.desc }

func (f *fetchedMetric) Write(out *dto.Metric) error {
	out.Label = f.labels
	out.Counter, out.Gauge, out.Untyped = f.m.Counter, f.m.Gauge, f.m.Untyped
	out.Summary, out.Histogram = f.m.Summary, f.m.Histogram
	out.TimestampMs = f.m.TimestampMs
	return nil
}
