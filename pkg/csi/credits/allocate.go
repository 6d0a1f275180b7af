// Package credits assigns RPC-over-RDMA credits to pods: each export
// server has a credit budget (the receives it posts for all connections,
// RFC 8166 section 3.3.1), and each pod that mounts a volume of ours gets a
// share, kept in a Kubernetes ConfigMap (the ledger) that kubectl shows and
// the node plugin reads when it mounts the pod's volume.
package credits

import "sort"

// Want is one pod's demand on one server.
type Want struct {
	Key     string // ledger key of the pod: NAMESPACE.NAME
	Desired int    // credits asked for (StorageClass creditsPerPod or the pod's annotation)
	Order   string // tie-break for who is refused first when pods outnumber the budget (creation time, then name)
}

// Allocate shares budget credits among wants by max-min fairness (water
// filling): when the sum of the desired credits fits, everyone gets what
// they asked; otherwise every pod gets min(desired, fair share), the
// credits a small pod does not use going to the others. When there are
// more pods than credits, the pods first in Order get 1 credit and the
// rest 0 (refused). The result maps key to granted credits.
func Allocate(budget int, wants []Want) map[string]int {
	out := make(map[string]int, len(wants))
	if budget <= 0 {
		for _, w := range wants {
			out[w.Key] = 0
		}
		return out
	}
	ws := append([]Want(nil), wants...)
	sort.Slice(ws, func(i, j int) bool {
		if ws[i].Order != ws[j].Order {
			return ws[i].Order < ws[j].Order
		}
		return ws[i].Key < ws[j].Key
	})
	if len(ws) > budget {
		for i, w := range ws {
			if i < budget {
				out[w.Key] = 1
			} else {
				out[w.Key] = 0
			}
		}
		return out
	}
	// water filling, smallest demand first
	byDesire := append([]Want(nil), ws...)
	sort.SliceStable(byDesire, func(i, j int) bool { return byDesire[i].Desired < byDesire[j].Desired })
	left := budget
	for i, w := range byDesire {
		share := left / (len(byDesire) - i)
		g := max(min(w.Desired, share), 1)
		out[w.Key] = g
		left -= g
	}
	return out
}
