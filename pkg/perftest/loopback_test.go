package perftest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

func TestLoopback(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"write_bw", Options{Test: WriteBW, Size: 64 << 10, Iters: 20, Depth: 4}},
		{"read_bw", Options{Test: ReadBW, Size: 64 << 10, Iters: 20, Depth: 4}},
		{"send_bw", Options{Test: SendBW, Size: 64 << 10, Iters: 20, Depth: 4}},
		{"send_lat", Options{Test: SendLat, Iters: 50}},
		{"write_bw no CRC odd size", Options{Test: WriteBW, Size: 100_003, Iters: 5, Depth: 2, NoCRC: true}},
		{"read_bw depth 1", Options{Test: ReadBW, Size: 3, Iters: 7, Depth: 1}},
		{"send_bw depth 1", Options{Test: SendBW, Size: 1000, Iters: 9, Depth: 1}},
		{"send_bw depth > iters", Options{Test: SendBW, Size: 4 << 10, Iters: 3, Depth: 8}},
		{"send_bw many credits", Options{Test: SendBW, Size: 512, Iters: 200, Depth: 5}},
		{"send_lat 1MiB", Options{Test: SendLat, Size: 1 << 20, Iters: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Verify, o.Baseline = true, true
			rep, err := RunLoopback(testenv.Context(t, 30*time.Second), o)
			if err != nil {
				t.Fatal(err)
			}
			r := rep.RDMA
			if r.Test != o.Test || r.Transport != "siw" || !r.Verified || r.CRC == o.NoCRC || r.Iters != o.Iters {
				t.Fatalf("result %+v for %+v", r, o)
			}
			if r.Seconds <= 0 || r.MiBPerSec <= 0 || r.MsgPerSec <= 0 {
				t.Fatalf("no rate: %+v", r)
			}
			if (r.Latency != nil) != o.Test.Latency() {
				t.Fatalf("latency %+v for %v", r.Latency, o.Test)
			}
			if l := r.Latency; l != nil && !(0 < l.Min && l.Min <= l.P50 && l.P50 <= l.P99 && l.P99 <= l.Max && l.Min <= l.Mean && l.Mean <= l.Max) {
				t.Fatalf("latency summary out of order: %+v", l)
			}
			if rep.Baseline == nil || rep.Baseline.Transport != "tcp" || rep.Baseline.MiBPerSec <= 0 || rep.Ratio == nil || rep.Ratio.MiBPerSec <= 0 {
				t.Fatalf("baseline %+v ratio %+v", rep.Baseline, rep.Ratio)
			}
		})
	}
}

// TestVerifyDetectsCorruption damages the sink of each test just before it
// is checked: the run must fail with ErrVerify.
func TestVerifyDetectsCorruption(t *testing.T) {
	for _, test := range Tests {
		t.Run(string(test), func(t *testing.T) {
			o := Options{Test: test, Size: 4096, Iters: 4, Depth: 2, Verify: true}
			o.corruptSink = func(b []byte) { b[len(b)/2] ^= 0x40 }
			_, err := RunLoopback(testenv.Context(t, 30*time.Second), o)
			if !errors.Is(err, ErrVerify) {
				t.Fatalf("corrupted sink: error %v, want ErrVerify", err)
			}
			if !strings.Contains(err.Error(), "byte 2048 of 4096") {
				t.Fatalf("error does not name the damaged byte: %v", err)
			}
		})
	}
}

// TestCorruptionIgnoredWithoutVerify: the hook only runs on the verify path.
func TestCorruptionIgnoredWithoutVerify(t *testing.T) {
	o := Options{Test: WriteBW, Size: 4096, Iters: 2, Depth: 2}
	called := false
	o.corruptSink = func([]byte) { called = true }
	if _, err := RunLoopback(testenv.Context(t, 30*time.Second), o); err != nil || called {
		t.Fatalf("err %v, verify path ran: %v", err, called)
	}
}

func TestReportJSONDecodes(t *testing.T) {
	rep, err := RunLoopback(testenv.Context(t, 30*time.Second), Options{Test: SendLat, Iters: 10, Baseline: true, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got Report
	dec := json.NewDecoder(bytes.NewReader(buf.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decoding %s: %v", buf.Bytes(), err)
	}
	if got.RDMA.Test != SendLat || got.RDMA.SizeBytes != DefaultLatSize || got.RDMA.Latency == nil ||
		got.RDMA.Latency.P50 != rep.RDMA.Latency.P50 || got.Baseline == nil || got.Ratio == nil || got.Ratio.LatencyP50 == 0 {
		t.Fatalf("decoded %+v from %s", got, buf.Bytes())
	}
	var raw map[string]map[string]any
	if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"test", "transport", "size_bytes", "bw_mib_per_s", "msg_per_s", "latency_us"} {
		if _, ok := raw["rdma"][k]; !ok {
			t.Errorf("JSON rdma has no %q: %s", k, buf.Bytes())
		}
	}
}

func TestReportTable(t *testing.T) {
	rep, err := RunLoopback(testenv.Context(t, 30*time.Second), Options{Test: WriteBW, Size: 8192, Iters: 4, Baseline: true})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[3], "ratio siw/tcp: bandwidth ") {
		t.Fatalf("table:\n%s", buf.String())
	}
	// aligned: every column starts at the same place in the header and rows
	starts := func(l string) []int {
		var s []int
		r := []rune(l)
		for i := range r {
			if r[i] != ' ' && (i == 0 || r[i-1] == ' ' && i > 1 && r[i-2] == ' ') {
				s = append(s, i)
			}
		}
		return s
	}
	head := starts(lines[0])
	if len(head) != 12 {
		t.Fatalf("header columns %v:\n%s", head, buf.String())
	}
	for _, l := range lines[1:3] {
		if got := starts(l); fmt.Sprint(got) != fmt.Sprint(head) || strings.HasSuffix(l, " ") {
			t.Fatalf("row columns at %v, header at %v:\n%s", got, head, buf.String())
		}
	}
	if f := strings.Fields(lines[1]); f[0] != "write_bw" || f[1] != "siw" || f[2] != "8KiB" || f[5] != "on" {
		t.Fatalf("row %q", lines[1])
	}
}

// TestServerRejects: a request the server cannot serve is rejected with a
// reason the client reports.
func TestServerRejects(t *testing.T) {
	ctx := testenv.Context(t, 30*time.Second)
	srv, err := Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.errs = make(chan error, 4)
	go func() { _ = srv.Serve(ctx) }()
	t.Cleanup(func() { srv.Close() })

	for _, tc := range []struct {
		name string
		priv []byte
		want string
	}{
		{"not perftest", []byte("hello"), "not a perftest request"},
		{"zero depth", (&request{test: WriteBW, size: 64, iters: 1}).encode(), "must not be 0"},
		{"too much memory", (&request{test: SendBW, size: MaxSize, iters: 1, depth: 2}).encode(), "receive buffers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := newDevice(false, false)
			ep, err := newEndpoint(dev, endpointSpec{sendDepth: 1, dataLen: 64})
			if err != nil {
				t.Fatal(err)
			}
			defer ep.close()
			_, err = dev.Connect(ctx, srv.Addr().String(), ep.qp, verbs.ConnParam{PrivateData: tc.priv})
			var rej *verbs.RejectError
			if !errors.As(err, &rej) || !strings.Contains(rejectReason(rej.PrivateData), tc.want) {
				t.Fatalf("connect: %v, want a reject saying %q", err, tc.want)
			}
			if err := <-srv.errs; err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("server: %v", err)
			}
		})
	}
}

func TestRunClientOptionErrors(t *testing.T) {
	for _, o := range []Options{
		{Test: "bogus"},
		{Size: MaxSize + 1},
		{Depth: MaxDepth + 1},
		{Iters: -1},
		{Test: SendBW, Size: 1 << 20, Depth: 1024},
	} {
		if _, err := RunClient(testenv.Context(t, 30*time.Second), "127.0.0.1:1", o); err == nil || !strings.HasPrefix(err.Error(), "perftest: ") {
			t.Errorf("%+v: error %v", o, err)
		}
	}
}

func TestRunClientTimeout(t *testing.T) {
	ctx := testenv.Context(t, 30*time.Second)
	srv, err := Listen(ctx, "127.0.0.1:0") // listens but never serves
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	_, err = RunClient(ctx, srv.Addr().String(), Options{Timeout: 200 * time.Millisecond})
	if err == nil {
		t.Fatal("a run against a server that never accepts succeeded")
	}
}
