// Package credits assigns RPC-over-RDMA credits to pods: each export
// server has a credit budget (the receives it posts for all connections,
// RFC 8166 section 3.3.1), and each pod that mounts a volume of ours gets a
// share, kept in a Kubernetes ConfigMap (the ledger) that kubectl shows and
// the node plugin reads when it mounts the pod's volume.
package credits

import (
	"cmp"
	"slices"

	"github.com/nfsrdma/nfsrdma-csi/pkg/fairshare"
)

// Want is one pod's demand on one server.
type Want struct {
	Key     string // ledger key of the pod: NAMESPACE.NAME
	Desired int    // credits asked for (StorageClass creditsPerPod or the pod's annotation)
	Order   string // tie-break for who is refused first when pods outnumber the budget (creation time, then name)
}

// Allocate shares budget credits among wants by max-min fairness
// (fairshare.Divide, in Order): when the sum of the desired credits fits,
// everyone gets what they asked; otherwise every pod gets min(desired, fair
// share), the credits a small pod does not use going to the others and the
// remainder of an uneven split to the pods first in Order. Every pod gets
// at least 1 credit while the budget covers one each; when there are more
// pods than credits, the pods first in Order get 1 and the rest 0
// (refused). The result maps key to granted credits.
func Allocate(budget int, wants []Want) map[string]int {
	ws := slices.Clone(wants)
	slices.SortFunc(ws, func(a, b Want) int {
		return cmp.Or(cmp.Compare(a.Order, b.Order), cmp.Compare(a.Key, b.Key))
	})
	desired := make([]int, len(ws))
	for i, w := range ws {
		desired[i] = w.Desired
	}
	shares := fairshare.Divide(desired, max(budget, 0), 1)
	out := make(map[string]int, len(ws))
	for i, w := range ws {
		out[w.Key] = shares[i]
	}
	return out
}
