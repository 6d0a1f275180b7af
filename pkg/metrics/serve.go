package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/internal/unixsock"
)

// Timeouts of the HTTP server of Serve and ServeUnix.
const (
	readHeaderTimeout = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	shutdownTimeout   = 5 * time.Second
)

// Handler returns the HTTP handler of Serve: /metrics serves reg (text or
// protobuf, as the scraper asks; a failing collector costs only its own
// metrics, logged) and /healthz answers "ok".
func Handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      promLogger{},
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      reg, // promhttp_metric_handler_errors_total
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

type promLogger struct{}

func (promLogger) Println(v ...any) { klog.ErrorS(nil, "metrics: "+fmt.Sprint(v...)) }

// Serve serves Handler(reg) over HTTP on addr ("host:port", ":9811") until
// ctx ends, then shuts down (requests in progress get up to 5 s) and
// returns nil; or returns the listen or serve error. addr "" means off:
// it returns nil at once.
func Serve(ctx context.Context, addr string, reg *prometheus.Registry) error {
	if addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	klog.InfoS("metrics: serving", "addr", l.Addr())
	return serveListener(ctx, l, reg)
}

// ServeUnix is Serve on a unix socket at path (a stale socket file there
// is removed; the socket is made mode 0600 and removed on return unless
// another process bound the path since): how a
// `driver mount` process exposes its metrics to the node plugin. path ""
// means off.
func ServeUnix(ctx context.Context, path string, reg *prometheus.Registry) error {
	if path == "" {
		return nil
	}
	l, err := unixsock.Listen("unix", path, 0o600)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return serveListener(ctx, l, reg)
}

// serveListener serves Handler(reg) on l until ctx ends (see Serve).
func serveListener(ctx context.Context, l net.Listener, reg *prometheus.Registry) error {
	hs := &http.Server{Handler: Handler(reg), ReadHeaderTimeout: readHeaderTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("metrics: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	_ = hs.Shutdown(sctx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// NewProcessRegistry returns a registry with the Go runtime and process
// collectors (go_*, process_*) and cs: the registry of one of the
// driver's processes.
func NewProcessRegistry(cs ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(cs...)
	return reg
}
