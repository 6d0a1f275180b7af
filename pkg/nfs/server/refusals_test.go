package server

import (
	"net/netip"
	"testing"
	"time"
)

// TestRefusalLogRate: one line per client, program and reason per
// refusalInterval; other clients, programs and reasons have lines of their
// own.
func TestRefusalLogRate(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newRefusalLog()
	l.lim.Now = func() time.Time { return now }
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
	now = now.Add(refusalInterval)
	if !l.refused(a, "NFS", "READ", "/v", reasonNotListed) {
		t.Error("a refusal after the interval not logged")
	}
}
