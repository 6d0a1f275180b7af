//go:build ibverbs && cgo

package ibverbs

import (
	"errors"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// Unit tests that need no RDMA device: they run on the CI host.

func TestIncKey(t *testing.T) {
	for _, c := range []struct{ in, want uint32 }{{0x1200, 0x1201}, {0x12ff, 0x1200}, {0xabcdef07, 0xabcdef08}} {
		if got := incKey(c.in); got != c.want {
			t.Errorf("incKey(%#x) = %#x, want %#x", c.in, got, c.want)
		}
	}
}

func TestWCStatusMapping(t *testing.T) {
	for _, c := range []struct {
		in   int
		want verbs.WCStatus
		err  error
	}{
		{0, verbs.WCSuccess, nil},
		{1, verbs.WCLocLenErr, verbs.ErrLocalError},
		{4, verbs.WCLocProtErr, verbs.ErrInvalidKey},
		{5, verbs.WCFlushErr, verbs.ErrDisconnect},
		{10, verbs.WCRemAccessErr, verbs.ErrRemoteError},
		{11, verbs.WCRemOpErr, verbs.ErrRemoteError},
		{12, verbs.WCFatalErr, verbs.ErrTimeout},
	} {
		got, err := wcStatusOf(c.in)
		if got != c.want || !errors.Is(err, c.err) && c.err != nil {
			t.Errorf("status %d: %v %v, want %v %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestRejectReason(t *testing.T) {
	if r := rejectReason("roce", 28); r != "consumer reject" {
		t.Error(r)
	}
	if r := rejectReason("iwarp", -111); r != "connection refused" {
		t.Error(r)
	}
}

func TestOpenMissing(t *testing.T) {
	if _, err := Open("no-such-device0", Config{}); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Open of a missing device: %v", err)
	}
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		t.Logf("device %+v", d)
	}
}
