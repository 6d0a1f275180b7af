package posixlock

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestSet(t *testing.T) {
	type op struct {
		clear      bool
		start, end uint64
		excl       bool
	}
	for _, tc := range []struct {
		name string
		ops  []op
		want []Range
	}{
		{"one", []op{{false, 0, 9, true}}, []Range{{0, 9, true}}},
		{"merge adjacent", []op{{false, 0, 9, true}, {false, 10, 19, true}}, []Range{{0, 19, true}}},
		{"no merge of types", []op{{false, 0, 9, true}, {false, 10, 19, false}}, []Range{{0, 9, true}, {10, 19, false}}},
		{"split by unlock", []op{{false, 0, 99, false}, {true, 10, 19, false}}, []Range{{0, 9, false}, {20, 99, false}}},
		{"upgrade middle", []op{{false, 0, 99, false}, {false, 40, 59, true}}, []Range{{0, 39, false}, {40, 59, true}, {60, 99, false}}},
		{"downgrade joins", []op{{false, 0, 99, false}, {false, 40, 59, true}, {false, 40, 59, false}}, []Range{{0, 99, false}}},
		{"to EOF", []op{{false, 5, MaxOffset, true}, {true, 100, MaxOffset, false}}, []Range{{5, 99, true}}},
		{"unlock all", []op{{false, 5, 10, true}, {false, 50, 60, false}, {true, 0, MaxOffset, false}}, nil},
		{"overlapping same type", []op{{false, 0, 10, true}, {false, 5, 20, true}}, []Range{{0, 20, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Set
			for _, o := range tc.ops {
				if o.clear {
					s.Clear(o.start, o.end)
				} else {
					s.Add(o.start, o.end, o.excl)
				}
			}
			if got := s.Ranges(); !slices.Equal(got, tc.want) {
				t.Fatalf("ranges %v, want %v", got, tc.want)
			}
		})
	}
	var s Set
	s.Add(0, 9, true)
	s.Add(10, 19, false)
	if !s.Covers(0, 19, false) || s.Covers(0, 19, true) || !s.Covers(2, 8, true) || s.Covers(0, 20, false) {
		t.Fatal("Covers wrong")
	}
}

func TestTable(t *testing.T) {
	var tb Table
	if !tb.TryLock(1, 0, 99, false) || !tb.TryLock(2, 50, 149, false) {
		t.Fatal("shared locks conflict")
	}
	if tb.TryLock(3, 120, 130, true) {
		t.Fatal("exclusive over a shared lock granted")
	}
	if r, o, ok := tb.Conflict(3, 120, 130, true); !ok || o != 2 || r.Start != 50 {
		t.Fatalf("conflict %v %d %v", r, o, ok)
	}
	done := make(chan error, 1)
	go func() { done <- tb.Lock(context.Background(), 3, 120, 130, true) }()
	select {
	case err := <-done:
		t.Fatalf("blocking lock returned %v while held", err)
	case <-time.After(50 * time.Millisecond):
	}
	tb.Unlock(2, 0, MaxOffset)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("blocking lock not granted after unlock")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := tb.Lock(ctx, 1, 125, 125, false); err == nil {
		t.Fatal("lock under an exclusive lock granted")
	}
	if _, _, ok := tb.Conflict(1, 125, 125, false); !ok {
		t.Fatal("cancelled wait left no conflict")
	}
}
