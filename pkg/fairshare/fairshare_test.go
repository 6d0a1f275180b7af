package fairshare

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestDivide(t *testing.T) {
	for _, tc := range []struct {
		demands     []int
		budget, min int
		want        []int
	}{
		{[]int{8, 8, 8}, -1, 1, []int{8, 8, 8}},   // unbounded
		{[]int{8, 8, 8}, 24, 1, []int{8, 8, 8}},   // fits
		{[]int{8, 8, 8}, 12, 1, []int{4, 4, 4}},   // fair thirds
		{[]int{8, 8, 8}, 13, 1, []int{5, 4, 4}},   // the remainder to the first
		{[]int{2, 8, 32}, 20, 1, []int{2, 8, 10}}, // water filling
		{[]int{2, 8, 32}, 12, 1, []int{2, 5, 5}},  // the small one's leftovers shared
		{[]int{32, 2}, 12, 1, []int{10, 2}},       // order of the result is the demands'
		{[]int{1, 1, 100}, 10, 1, []int{1, 1, 8}}, //
		{[]int{3, 3, 3}, 7, 1, []int{3, 2, 2}},    // remainder by the given order
		{[]int{4, 4, 4}, 2, 1, []int{1, 1, 0}},    // more demands than budget: the last refused
		{[]int{8}, 0, 1, []int{0}},                // no budget
		{[]int{8, 8, 8}, 13, 4, []int{5, 4, 4}},   // the minimum covered for all: fair shares
		{[]int{8, 8, 8}, 10, 4, []int{4, 4, 2}},   // not covered: first come, first served
		{[]int{2, 8, 8}, 10, 4, []int{2, 4, 4}},   // a demand below the minimum needs only itself
		{[]int{0, -3, 5}, 4, 1, []int{0, 0, 4}},   // nothing for no demand
		{nil, 10, 1, []int{}},                     //
	} {
		if got := Divide(tc.demands, tc.budget, tc.min); !slices.Equal(got, tc.want) {
			t.Errorf("Divide(%v, %d, %d) = %v, want %v", tc.demands, tc.budget, tc.min, got, tc.want)
		}
	}
}

// TestDivideProperties: within demand, within a non-negative budget, all
// of the budget used when demands exceed it, at least the minimum for
// everyone when the budget covers it, and max-min fair: nobody short of its
// demand has less than anybody else's share minus one.
func TestDivideProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		n := r.IntN(16)
		demands := make([]int, n)
		sum := 0
		for i := range demands {
			demands[i] = r.IntN(64)
			sum += demands[i]
		}
		budget, minShare := r.IntN(300)-10, r.IntN(4)
		got := Divide(demands, budget, minShare)
		total, need := 0, 0
		for i, g := range got {
			total += g
			need += min(demands[i], minShare)
			if g < 0 || g > demands[i] {
				t.Fatalf("Divide(%v, %d, %d) = %v: share %d out of 0..demand", demands, budget, minShare, got, g)
			}
		}
		if budget < 0 || sum <= budget {
			if !slices.Equal(got, demands) {
				t.Fatalf("Divide(%v, %d, %d) = %v: the budget covers every demand", demands, budget, minShare, got)
			}
			continue
		}
		if total != budget {
			t.Fatalf("Divide(%v, %d, %d) = %v: %d granted of %d", demands, budget, minShare, got, total, budget)
		}
		if need > budget {
			continue
		}
		for i, g := range got {
			if g < min(demands[i], minShare) {
				t.Fatalf("Divide(%v, %d, %d) = %v: %d below the minimum", demands, budget, minShare, got, i)
			}
			if g >= demands[i] {
				continue
			}
			for j, h := range got {
				if h > g+1 {
					t.Fatalf("Divide(%v, %d, %d) = %v: %d short of its demand has %d, %d has %d", demands, budget, minShare, got, i, g, j, h)
				}
			}
		}
	}
}
