package server

import (
	"net/netip"
	"testing"
	"time"
)

// TestRefusalLogRate: one line per client, program and reason per
// refusalInterval; other clients, programs and reasons have lines of their
// own; the table stays bounded under many clients.
func TestRefusalLogRate(t *testing.T) {
	now := time.Unix(1000, 0)
	l := refusalLog{now: func() time.Time { return now }}
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	if !l.refused(a, "NFS", "READ", "/v", reasonNotListed) {
		t.Fatal("first refusal not logged")
	}
	for range 100 {
		if l.refused(a, "NFS", "GETATTR", "/v", reasonNotListed) {
			t.Fatal("a refusal within the interval was logged")
		}
	}
	if !l.refused(b, "NFS", "READ", "/v", reasonNotListed) {
		t.Error("another client's refusal not logged")
	}
	if !l.refused(a, "MOUNT", "MNT", "/v", reasonNotListed) {
		t.Error("another program's refusal not logged")
	}
	if !l.refused(a, "NFS", "READ", "/v", reasonNoCert) {
		t.Error("another reason's refusal not logged")
	}
	if got := l.m[refusalKey{a, "NFS", reasonNotListed}].suppressed; got != 100 {
		t.Errorf("%d refusals counted as not logged, want 100", got)
	}
	now = now.Add(refusalInterval)
	if !l.refused(a, "NFS", "READ", "/v", reasonNotListed) {
		t.Error("a refusal after the interval not logged")
	}
	if got := l.m[refusalKey{a, "NFS", reasonNotListed}].suppressed; got != 0 {
		t.Errorf("%d refusals counted after a line, want 0", got)
	}

	// many clients: the table is bounded; old entries make room
	for i := range refusalClients + 10 {
		l.refused(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), "NFS", "READ", "/v", reasonNotListed)
	}
	if len(l.m) > refusalClients {
		t.Fatalf("%d entries, bound %d", len(l.m), refusalClients)
	}
	now = now.Add(refusalInterval)
	if !l.refused(netip.MustParseAddr("10.2.0.1"), "NFS", "READ", "/v", reasonNotListed) {
		t.Error("a new client's refusal not logged once the old entries expired")
	}
}
