package fusemount

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/fuseuring"
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
		Help: "What the last handover to this process carried, by kind: nodes (kernel nodeids), files (open file handles), locks (held NLM lock ranges), requests (held by the old process, or read by a process that died, and sent again by the kernel).",
	}, []string{"kind"})
	handoverResent = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nfsrdma_mount_handover_resent",
		Help: "What became of the requests the kernel sent again (FUSE_NOTIFY_RESEND) after the last handover or recovery to this process, by result: handled (read by the old or dead process, handled here), joined (a copy of a request this process was handling, answered by its reply), replayed (a copy of one it had answered, answered by the reply the kernel refused), dropped (refused replies that could not be kept: their copies were handled again).",
	}, []string{"result"})
)

// resentWait bounds the wait for the kernel's copies of the requests
// sent again after a handover or recovery (they are read within
// milliseconds of the resend; the planned handover's resend waits for
// the old process to exit).
const resentWait = 5 * time.Minute

// handoverMetrics returns the collector of this process's handovers and
// of the binary serving the mount (nfsrdma_mount_binary_info).
func handoverMetrics(version string) prometheus.Collector {
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "nfsrdma_mount_binary_info",
		Help:        "The version of the driver binary serving this mount (always 1).",
		ConstLabels: prometheus.Labels{"version": version},
	})
	info.Set(1)
	return collectors{info, handoverTotal, handoverPause, handoverCarried, handoverResent}
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
	kv := []any{"dir", dir, "direction", direction, "from_version", st.From, "to_version", st.To,
		"paused", st.Paused, "nodes", st.Nodes, "files", st.Files, "locks", st.Locks, "requests_carried", st.Held}
	if direction == "recover" {
		setResent(st.Resent)
		kv = append(kv, resentKV(st.Resent)...)
	}
	klog.InfoS("mount: handover done", kv...)
}

// setResent sets nfsrdma_mount_handover_resent.
func setResent(rs fuseuring.ResendStats) {
	handoverResent.WithLabelValues("handled").Set(float64(rs.Handled))
	handoverResent.WithLabelValues("joined").Set(float64(rs.Joined))
	handoverResent.WithLabelValues("replayed").Set(float64(rs.Replayed))
	handoverResent.WithLabelValues("dropped").Set(float64(rs.Dropped))
}

func resentKV(rs fuseuring.ResendStats) []any {
	return []any{"resent_handled", rs.Handled, "resent_joined", rs.Joined, "resent_replayed", rs.Replayed, "resent_dropped", rs.Dropped}
}

// recordRecovery records the recovery of dir by m (fusefs.Recover) once
// the requests the kernel sent again are read (at most resentWait): the
// requests carried are those copies.
func recordRecovery(ctx context.Context, dir string, m *fusefs.Mount, st fusefs.HandoverStats) {
	wctx, cancel := context.WithTimeout(ctx, resentWait)
	defer cancel()
	rs, err := m.Resent(wctx)
	switch {
	case errors.Is(err, fuseuring.ErrNoResend):
		klog.InfoS("mount: the kernel sent nothing again: requests the dead process read stay unanswered", "dir", dir)
	case err != nil:
		klog.ErrorS(err, "mount: requests sent again after the recovery not all read; counted so far", "dir", dir)
	}
	st.Resent = rs
	st.Held = int64(rs.Handled + rs.Joined + rs.Replayed)
	recordHandover(dir, "recover", st, nil)
}

// recordResent logs and sets what became of the requests the kernel sent
// again after m took the mount over (fusefs.Adopt), once they are read.
func recordResent(ctx context.Context, dir string, m *fusefs.Mount) {
	wctx, cancel := context.WithTimeout(ctx, resentWait)
	defer cancel()
	rs, err := m.Resent(wctx)
	if err != nil {
		klog.ErrorS(err, "mount: requests sent again after the handover not known", "dir", dir)
		return
	}
	setResent(rs)
	klog.InfoS("mount: requests sent again after the handover read", append([]any{"dir", dir}, resentKV(rs)...)...)
}
