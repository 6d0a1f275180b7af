package metrics

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The FUSE transport of a mount, scraped over HTTP: the transport in use
// at 1, the other at 0, and the request counts when counted.
func TestFUSETransportCollector(t *testing.T) {
	s := FUSETransport{Transport: FUSETransportIOURing, Counted: true, RingRequests: 1234, DevRequests: 56}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewFUSETransportCollector(func() FUSETransport { return s }, prometheus.Labels{"pod": "p"}))
	fams := scrape(t, http.DefaultClient, serveReg(t, reg)+"/metrics")
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"nfsrdma_mount_fuse_transport", l("transport", "io_uring", "pod", "p"), 1},
		{"nfsrdma_mount_fuse_transport", l("transport", "dev_fuse", "pod", "p"), 0},
		{"nfsrdma_mount_fuse_requests_total", l("transport", "io_uring", "pod", "p"), 1234},
		{"nfsrdma_mount_fuse_requests_total", l("transport", "dev_fuse", "pod", "p"), 56},
	} {
		if got := mustValue(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// go-fuse's /dev/fuse server counts nothing: no request counts
	s = FUSETransport{Transport: FUSETransportDevFUSE}
	fams = scrape(t, http.DefaultClient, serveReg(t, reg)+"/metrics")
	if got := mustValue(t, fams, "nfsrdma_mount_fuse_transport", l("transport", "dev_fuse", "pod", "p")); got != 1 {
		t.Errorf("dev_fuse transport = %v, want 1", got)
	}
	if _, ok := fams["nfsrdma_mount_fuse_requests_total"]; ok {
		t.Error("request counts exported without counts")
	}
}
