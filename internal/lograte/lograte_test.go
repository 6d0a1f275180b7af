package lograte

import (
	"testing"
	"time"
)

// TestLimiter: one event per key per interval, the others counted and
// reported with the next allowed one; other keys are independent; the
// table stays bounded and makes room as keys age.
func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := Limiter{Interval: 10 * time.Second, MaxKeys: 100, Now: func() time.Time { return now }}
	type key struct{ addr, reason string }
	a, b := key{"10.0.0.1", "x"}, key{"10.0.0.2", "x"}
	if ok, n := l.Allow(a); !ok || n != 0 {
		t.Fatalf("first event: %v, %d skipped", ok, n)
	}
	for range 7 {
		if ok, _ := l.Allow(a); ok {
			t.Fatal("an event within the interval was allowed")
		}
	}
	if ok, _ := l.Allow(b); !ok {
		t.Error("another key's event was not allowed")
	}
	if ok, _ := l.Allow(key{"10.0.0.1", "y"}); !ok {
		t.Error("the same address with another reason was not allowed")
	}
	now = now.Add(9 * time.Second)
	if ok, _ := l.Allow(a); ok {
		t.Error("an event 9 s after the last allowed one was allowed")
	}
	now = now.Add(time.Second)
	if ok, n := l.Allow(a); !ok || n != 8 {
		t.Errorf("after the interval: %v, %d skipped; want true, 8", ok, n)
	}
	if ok, n := l.Allow(a); ok || n != 0 {
		t.Errorf("right after: %v, %d", ok, n)
	}

	for i := range 200 {
		l.Allow(i)
	}
	if l.Len() > 100 {
		t.Fatalf("%d keys remembered, at most 100", l.Len())
	}
	if ok, _ := l.Allow("new"); ok {
		t.Error("a new key was allowed with the table full of recent keys")
	}
	now = now.Add(10 * time.Second)
	if ok, _ := l.Allow("new"); !ok {
		t.Error("a new key was not allowed once the old keys aged")
	}
	if l.Len() != 1 {
		t.Errorf("%d keys after the old ones aged, want 1", l.Len())
	}
}
