package fusemount

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/fusefs"
)

// listenHandover listens on the unix socket path (a stale socket file is
// replaced) and returns the connections of successors; stop closes it.
// An empty path listens on nothing.
func listenHandover(path string) (<-chan *net.UnixConn, func(), error) {
	ch := make(chan *net.UnixConn)
	if path == "" {
		return ch, func() {}, nil
	}
	_ = os.Remove(path)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("handover socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("handover socket: %w", err)
	}
	done := make(chan struct{})
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			select {
			case ch <- c:
			case <-done:
				c.Close()
				return
			}
		}
	}()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			close(done)
			l.Close()
		})
	}, nil
}

// takeover connects to the process serving cfg.Dir on cfg.Takeover and
// takes its mount over.
func takeover(ctx context.Context, cfg Config, fc fusefs.Config) (*fusefs.Mount, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: cfg.Takeover, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("takeover: %w", err)
	}
	m, st, err := fusefs.Adopt(ctx, cfg.Dir, fc, c)
	if err != nil {
		c.Close()
		recordHandover(cfg.Dir, "to", st, err)
		return nil, fmt.Errorf("takeover of %s: %w", cfg.Dir, err)
	}
	recordHandover(cfg.Dir, "to", st, nil)
	return m, nil
}

// handover metrics of this process: one mount per process.
var (
	handoverTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nfsrdma_mount_handovers_total",
		Help: "Handovers of this mount's FUSE connection by this process, by direction (from: this process handed it over; to: it took it over; recover: it took it up after the serving process died) and result (ok, error).",
	}, []string{"direction", "result"})
	handoverPause = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nfsrdma_mount_handover_pause_seconds",
		Help: "How long the last handover that brought the mount to this process held its requests (the old process's pause until this one answered), by the old binary's version.",
	}, []string{"from_version"})
	handoverCarried = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nfsrdma_mount_handover_carried",
		Help: "What the last handover to this process carried, by kind: nodes (kernel nodeids), files (open file handles), locks (held NLM lock ranges), requests (held by the old process and sent again by the kernel).",
	}, []string{"kind"})
)

// handoverMetrics returns the collector of this process's handovers and
// of the binary serving the mount (nfsrdma_mount_binary_info).
func handoverMetrics(version string) prometheus.Collector {
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "nfsrdma_mount_binary_info",
		Help:        "The version of the driver binary serving this mount (always 1).",
		ConstLabels: prometheus.Labels{"version": version},
	})
	info.Set(1)
	return collectors{info, handoverTotal, handoverPause, handoverCarried}
}

// collectors is several collectors as one.
type collectors []prometheus.Collector

func (c collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range c {
		x.Describe(ch)
	}
}

func (c collectors) Collect(ch chan<- prometheus.Metric) {
	for _, x := range c {
		x.Collect(ch)
	}
}

// recordHandover logs and counts a handover of dir in direction ("from":
// this process handed the mount over, "to": it took it over).
func recordHandover(dir, direction string, st fusefs.HandoverStats, err error) {
	if err != nil {
		handoverTotal.WithLabelValues(direction, "error").Inc()
		klog.ErrorS(err, "mount: handover failed", "dir", dir, "direction", direction, "from_version", st.From, "to_version", st.To)
		return
	}
	handoverTotal.WithLabelValues(direction, "ok").Inc()
	if direction != "from" {
		handoverPause.WithLabelValues(st.From).Set(st.Paused.Seconds())
		handoverCarried.WithLabelValues("nodes").Set(float64(st.Nodes))
		handoverCarried.WithLabelValues("files").Set(float64(st.Files))
		handoverCarried.WithLabelValues("locks").Set(float64(st.Locks))
		handoverCarried.WithLabelValues("requests").Set(float64(st.Held))
	}
	klog.InfoS("mount: handover done", "dir", dir, "direction", direction, "from_version", st.From, "to_version", st.To,
		"paused", st.Paused, "nodes", st.Nodes, "files", st.Files, "locks", st.Locks, "requests_carried", st.Held)
}
