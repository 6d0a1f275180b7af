package fusefs

import (
	"testing"
	"time"
)

func TestAttrCacheAdaptive(t *testing.T) {
	var c attrCache
	a := attrForTest(1)
	lo, hi := 3*time.Second, 10*time.Second
	steps := []struct {
		attr    int
		timeo   time.Duration
		changed bool
	}{
		{1, 3 * time.Second, false}, // first sight
		{1, 6 * time.Second, false}, // unchanged: doubled
		{1, 10 * time.Second, false},
		{1, 10 * time.Second, false}, // capped
		{2, 3 * time.Second, true},   // changed: back to min
	}
	for i, s := range steps {
		a = attrForTest(s.attr)
		timeo, changed := c.update(&a, lo, hi)
		if timeo != s.timeo || changed != s.changed {
			t.Errorf("step %d: %v %v, want %v %v", i, timeo, changed, s.timeo, s.changed)
		}
	}
	var z attrCache
	if timeo, _ := z.update(&a, 0, 0); timeo != 0 {
		t.Errorf("noac timeout %v", timeo)
	}
}
