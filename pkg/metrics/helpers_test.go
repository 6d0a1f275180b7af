package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// TestMain fails the run if goroutines started by the tests outlive them.
func TestMain(m *testing.M) { testenv.MainCheckingLeaks(m) }

// serveReg serves reg over real HTTP on a loopback port until the test
// ends and returns the base URL.
func serveReg(t testing.TB, reg *prometheus.Registry) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveListener(ctx, l, reg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + l.Addr().String()
}

// scrape GETs url (text format, as Prometheus with no protobuf) and parses
// the exposition with expfmt.
func scrape(t testing.TB, client *http.Client, url string) map[string]*dto.MetricFamily {
	t.Helper()
	if client == nil {
		client = http.DefaultClient
	}
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("content type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing the exposition: %v\n%s", err, body)
	}
	return fams
}

// find returns the metric of family name whose labels include want, or nil.
func find(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, p := range m.GetLabel() {
			have[p.GetName()] = p.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// value returns the value of a counter, gauge or untyped metric, or the
// sample count of a histogram; -1 when absent.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	m := find(fams, name, labels)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

// mustValue is value, failing the test when the metric is absent.
func mustValue(t testing.TB, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	v := value(fams, name, labels)
	if v < 0 {
		t.Fatalf("no %s%v; have %s", name, labels, names(fams))
	}
	return v
}

func names(fams map[string]*dto.MetricFamily) string {
	var n []string
	for k := range fams {
		n = append(n, k)
	}
	sort.Strings(n)
	return strings.Join(n, " ")
}

func l(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}
