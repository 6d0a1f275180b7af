package metrics_test

import (
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics/counters"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/devselect"
)

// Device choices, read at scrape time: no series before any choice, one
// per provider, device and transport after.
func TestDeviceCollector(t *testing.T) {
	var devices atomic.Pointer[[]devselect.Count]
	devices.Store(&[]devselect.Count{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(counters.NewDeviceCollector(func() []devselect.Count { return *devices.Load() }, nil))
	url := metrics.ServeReg(t, reg) + "/metrics"

	f := metrics.Scrape(t, nil, url)
	if v := metrics.Value(f, "nfsrdma_transport_selections_total", metrics.L("provider", "siw")); v >= 0 {
		t.Errorf("a selection series before any choice: %v", v)
	}
	devices.Store(&[]devselect.Count{{Provider: "siw", Device: "siw0", Transport: "iwarp", N: 2}, {Provider: "ibverbs", Device: "mlx5_0", Transport: "roce", N: 1}})
	f = metrics.Scrape(t, nil, url)
	if v := metrics.MustValue(t, f, "nfsrdma_transport_selections_total", metrics.L("provider", "siw", "device", "siw0", "transport", "iwarp")); v != 2 {
		t.Errorf("siw selections %v, want 2", v)
	}
	if v := metrics.MustValue(t, f, "nfsrdma_transport_selections_total", metrics.L("provider", "ibverbs", "device", "mlx5_0", "transport", "roce")); v != 1 {
		t.Errorf("ibverbs selections %v, want 1", v)
	}
}

// A device choice made in this process (devselect.Select) is counted
// and exported, as a mount process registers the collector.
func TestDeviceCollectorCountsChoices(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(counters.NewDeviceCollector(devselect.Counts, nil))
	url := metrics.ServeReg(t, reg) + "/metrics"
	choose := func() devselect.Choice {
		dev, ch, err := devselect.Select("127.0.0.1", devselect.OverrideSIW)
		if err != nil {
			t.Fatal(err)
		}
		dev.Close()
		return ch
	}
	ch := choose()
	labels := metrics.L("provider", ch.Provider, "device", ch.Device, "transport", ch.Transport)
	before := metrics.MustValue(t, metrics.Scrape(t, nil, url), "nfsrdma_transport_selections_total", labels)
	choose()
	if n := metrics.MustValue(t, metrics.Scrape(t, nil, url), "nfsrdma_transport_selections_total", labels); n != before+1 || n < 2 {
		t.Errorf("selections %v after %v, want one more", n, before)
	}
}
