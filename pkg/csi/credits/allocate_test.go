package credits

import (
	"fmt"
	"math/rand"
	"testing"
)

func TestAllocate(t *testing.T) {
	for _, tc := range []struct {
		budget int
		want   []int
		got    []int
	}{
		{64, []int{16, 16}, []int{16, 16}},       // fits
		{24, []int{16, 16}, []int{12, 12}},       // fair halves
		{24, []int{4, 16, 16}, []int{4, 10, 10}}, // the small one's leftovers shared
		{10, []int{1, 1, 100}, []int{1, 1, 8}},   // water filling
		{2, []int{8, 8, 8}, []int{1, 1, 0}},      // more pods than credits: the last refused
		{0, []int{8}, []int{0}},                  // no budget
		{7, []int{3, 3, 3}, []int{3, 2, 2}},      // remainder to the first in line
	} {
		var ws []Want
		for i, d := range tc.want {
			ws = append(ws, Want{Key: fmt.Sprint("p", i), Desired: d, Order: fmt.Sprint(i)})
		}
		got := Allocate(tc.budget, ws)
		for i := range tc.want {
			if got[fmt.Sprint("p", i)] != tc.got[i] {
				t.Errorf("budget %d, want %v: got %v, expected %v", tc.budget, tc.want, got, tc.got)
				break
			}
		}
	}
}

// TestAllocateProperties: never more than the budget, never more than
// desired, everyone gets at least one credit while pods fit the budget,
// and whenever someone got less than asked, nobody got more than one
// credit above that.
func TestAllocateProperties(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for n := 0; n < 5000; n++ {
		budget := r.Intn(300)
		var ws []Want
		for i := r.Intn(40); i > 0; i-- {
			ws = append(ws, Want{Key: fmt.Sprint("p", i), Desired: 1 + r.Intn(64), Order: fmt.Sprint(r.Intn(5))})
		}
		got := Allocate(budget, ws)
		sum, minShort := 0, -1
		for _, w := range ws {
			g := got[w.Key]
			sum += g
			if g > w.Desired || g < 0 {
				t.Fatalf("budget %d: %s got %d of %d", budget, w.Key, g, w.Desired)
			}
			if len(ws) <= budget && g < 1 {
				t.Fatalf("budget %d, %d pods: %s refused", budget, len(ws), w.Key)
			}
			if g < w.Desired && (minShort < 0 || g < minShort) {
				minShort = g
			}
		}
		if sum > budget {
			t.Fatalf("budget %d: granted %d", budget, sum)
		}
		if minShort >= 0 && len(ws) <= budget {
			for _, w := range ws {
				if got[w.Key] > minShort+1 {
					t.Fatalf("budget %d: %s got %d while another pod short of its demand got %d: %v", budget, w.Key, got[w.Key], minShort, got)
				}
			}
		}
	}
}
