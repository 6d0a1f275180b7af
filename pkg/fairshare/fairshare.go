// Package fairshare divides a budget among demands by max-min fairness, the
// rule behind RPC-over-RDMA credits: the export server's receive budget
// among its connections (pkg/rpcrdma) and the controller's credit budget
// among pods (pkg/csi/credits).
package fairshare

import "slices"

// Divide returns each demand's share of budget by max-min fairness (water
// filling): when the demands fit, each gets its demand; otherwise each gets
// the smaller of its demand and the fair share, the part of a fair share
// that a small demand leaves going to the others, and the remainder of an
// uneven split goes one each to the demands first in the given order.
//
// minShare is the least share of a demand: every demand gets at least
// min(minShare, demand) while the budget covers that for all; when it does
// not, the demands first in the given order get it and the rest 0 (refused).
// A negative budget is unbounded: every demand gets its demand. A negative
// demand counts as 0. The result has one share per demand, in their order,
// and never sums to more than a non-negative budget.
func Divide(demands []int, budget, minShare int) []int {
	out := make([]int, len(demands))
	for i, d := range demands {
		out[i] = max(d, 0)
	}
	if budget < 0 {
		return out
	}
	need := 0
	for _, d := range out {
		need += min(d, minShare)
	}
	if need > budget {
		// not even the least share for all: first come, first served
		left := budget
		for i, d := range out {
			out[i] = min(d, minShare, left)
			left -= out[i]
		}
		return out
	}
	order := make([]int, len(out))
	for i := range order {
		order[i] = i
	}
	// smallest demand first; equal demands keep their order
	slices.SortStableFunc(order, func(a, b int) int { return out[a] - out[b] })
	left := budget
	for k, i := range order {
		n := len(order) - k
		fair := left / n
		if out[i] <= fair {
			left -= out[i]
			continue
		}
		// every demand from here on wants more than the fair share
		rest := order[k:]
		slices.Sort(rest) // the remainder goes by the given order
		extra := left - fair*n
		for j, i := range rest {
			out[i] = fair
			if j < extra {
				out[i]++
			}
		}
		break
	}
	return out
}
