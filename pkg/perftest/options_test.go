package perftest

import (
	"testing"
	"time"
)

func TestParseByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ByteSize
		ok   bool
	}{
		{"64", 64, true},
		{"64B", 64, true},
		{"4KiB", 4 << 10, true},
		{"4K", 4 << 10, true},
		{"1MiB", 1 << 20, true},
		{" 2 MiB ", 2 << 20, true},
		{"1GiB", 1 << 30, true},
		{"1G", 1 << 30, true},
		{"", 0, false},
		{"-1", 0, false},
		{"1.5MiB", 0, false},
		{"1MB", 0, false},
		{"MiB", 0, false},
		{"99999999999GiB", 0, false},
	} {
		got, err := ParseByteSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	for _, b := range []ByteSize{1, 1000, 4 << 10, 1 << 20, 3 << 30} {
		var back ByteSize
		if err := back.Set(b.String()); err != nil || back != b {
			t.Errorf("%d -> %q -> %d, %v", b, b.String(), back, err)
		}
	}
}

func TestTestFlag(t *testing.T) {
	var v Test
	for _, k := range Tests {
		if err := v.Set(string(k)); err != nil || v != k {
			t.Fatalf("Set(%q): %v %v", k, v, err)
		}
	}
	if err := v.Set("ib_write_bw"); err == nil {
		t.Fatal("unknown test accepted")
	}
}

func TestDefaults(t *testing.T) {
	o, err := Options{Test: SendLat, Depth: 8}.withDefaults()
	if err != nil || o.Size != DefaultLatSize || o.Depth != 1 || o.Iters != DefaultIters {
		t.Fatalf("%+v %v", o, err)
	}
	o, err = Options{}.withDefaults()
	if err != nil || o.Test != WriteBW || o.Size != DefaultSize || o.Depth != DefaultDepth {
		t.Fatalf("%+v %v", o, err)
	}
}

func TestLatencySummary(t *testing.T) {
	rtts := make([]time.Duration, 100)
	for i := range rtts {
		rtts[len(rtts)-1-i] = time.Duration(i+1) * 2 * time.Microsecond // one-way i+1 µs, unsorted
	}
	l := latency(rtts)
	if l.Min != 1 || l.P50 != 50 || l.P99 != 99 || l.Max != 100 || l.Mean != 50.5 {
		t.Fatalf("%+v", l)
	}
}
