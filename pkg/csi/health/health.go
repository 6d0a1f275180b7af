// Package health serves a CSI plugin's liveness endpoint from the plugin's
// own process, as the livenessprobe sidecar does beside it: every GET
// /healthz calls the plugin's Identity Probe (CSI spec, "Probe") over its
// CSI endpoint, so that the answer proves the gRPC server accepts and
// serves calls, and answers 200 "ok" when the plugin is ready, 500 with
// the reason otherwise.
package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
)

// DefaultProbeTimeout bounds one Probe call unless Serve is given another
// timeout (livenessprobe's --probe-timeout default is 1 s; this plugin's
// node Probe asks the mounter, hence more).
const DefaultProbeTimeout = 3 * time.Second

const (
	readHeaderTimeout = 10 * time.Second
	shutdownTimeout   = 5 * time.Second
)

// Target converts a CSI endpoint (unix:///path or tcp://host:port) into a
// gRPC target; other forms are an error.
func Target(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("health: endpoint %q: %w", endpoint, err)
	}
	switch u.Scheme {
	case "unix":
		p := u.Path
		if u.Host != "" {
			p = filepath.Join(u.Host, p)
		}
		if !filepath.IsAbs(p) {
			return "unix:" + p, nil
		}
		return "unix://" + p, nil
	case "tcp":
		return "passthrough:///" + u.Host, nil
	}
	return "", fmt.Errorf("health: endpoint %q: want unix:///path or tcp://host:port", endpoint)
}

// Handler returns the /healthz handler over an open connection to the
// plugin: each GET calls Identity Probe, bounded by timeout; 200 "ok\n"
// when Probe succeeds and reports ready (or leaves ready unset, which the
// CSI spec reads as ready), 500 with the error or "not ready" otherwise.
func Handler(conn grpc.ClientConnInterface, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	id := csipb.NewIdentityClient(conn)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		resp, err := id.Probe(ctx, &csipb.ProbeRequest{})
		switch {
		case err != nil:
			klog.ErrorS(err, "health: Probe failed")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "probe failed: %v\n", err)
		case resp.GetReady() != nil && !resp.GetReady().GetValue():
			klog.InfoS("health: the plugin is not ready")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintln(w, "not ready")
		default:
			klog.V(5).InfoS("health: ok")
			fmt.Fprintln(w, "ok")
		}
	})
	return mux
}

// Serve serves Handler on addr ("host:port", ":29753") for the plugin at
// the CSI endpoint until ctx ends, then shuts down and returns nil; or
// returns the dial, listen or serve error. addr "" means off: it returns
// nil at once.
func Serve(ctx context.Context, addr, endpoint string, timeout time.Duration) error {
	if addr == "" {
		return nil
	}
	target, err := Target(endpoint)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer conn.Close()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	klog.InfoS("health: serving /healthz", "addr", l.Addr(), "endpoint", endpoint)
	hs := &http.Server{Handler: Handler(conn, timeout), ReadHeaderTimeout: readHeaderTimeout}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("health: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	_ = hs.Shutdown(sctx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("health: %w", err)
	}
	return nil
}
