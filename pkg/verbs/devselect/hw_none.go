//go:build !ibverbs || !cgo

package devselect

import (
	"context"
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// Built without the ibverbs tag (or without cgo): no kernel RDMA device
// can be used.
func hardware(_ context.Context, _ string, override string) (verbs.Device, Choice, error) {
	c := Choice{Reason: "built without the ibverbs tag"}
	if override != "" {
		return nil, c, fmt.Errorf("%w: override %q: built without the ibverbs tag", ErrNotFound, override)
	}
	return nil, c, nil
}
