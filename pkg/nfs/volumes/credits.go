package volumes

import (
	"fmt"
	"maps"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// SetCredits replaces the RPC-over-RDMA credits granted per AUTH_SYS
// machine name (admin.Credits; RFC 8166 section 3.3.1): the exporter's
// NFS/RDMA listener applies them to each connection from its next reply,
// and the state file keeps them across restarts. Errors wrap
// admin.ErrInvalid for a grant below 1 or a machine name empty or longer
// than admin.MaxMachineName bytes (nothing changed), or are internal when
// the state file cannot be written (the grants apply anyway).
func (r *Registry) SetCredits(grants map[string]int) error {
	if err := checkCredits(grants); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.credits = maps.Clone(grants)
	if r.exp != nil {
		r.exp.SetMachineGrants(r.credits)
	}
	klog.V(2).InfoS("volumes: credit grants set", "machines", len(grants))
	return r.saveLocked()
}

// checkCredits checks credit grants per machine name (SetCredits, and the
// state file's): errors wrap admin.ErrInvalid for a grant below 1 or a
// machine name empty or longer than admin.MaxMachineName bytes.
func checkCredits(grants map[string]int) error {
	for m, n := range grants {
		if m == "" || len(m) > admin.MaxMachineName {
			return fmt.Errorf("%w: machine name %q: want 1 to %d bytes", admin.ErrInvalid, m, admin.MaxMachineName)
		}
		if n < 1 {
			return fmt.Errorf("%w: %d credits for %q: a grant is at least 1 (RFC 8166 section 3.3.1)", admin.ErrInvalid, n, m)
		}
	}
	return nil
}

// Credits returns the credit grants per machine name and the exporter's
// NFS/RDMA connections with what each is granted now.
func (r *Registry) Credits() admin.Credits {
	r.mu.Lock()
	out := admin.Credits{Grants: maps.Clone(r.credits)}
	exp := r.exp
	r.mu.Unlock()
	if out.Grants == nil {
		out.Grants = map[string]int{}
	}
	if exp != nil {
		out.Connections = exp.Connections()
	}
	return out
}
