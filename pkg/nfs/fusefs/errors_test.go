package fusefs

import (
	"context"
	"fmt"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

func TestToErrno(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{fmt.Errorf("nfs3 LOOKUP: %w", nfs3.ErrNoEnt), syscall.ENOENT},
		{fmt.Errorf("nfs3 CREATE: %w", nfs3.ErrExist), syscall.EEXIST},
		{fmt.Errorf("nfs3 RMDIR: %w", nfs3.ErrNotEmpty), syscall.ENOTEMPTY},
		{fmt.Errorf("nfs3 GETATTR: %w", nfs3.ErrStale), syscall.ESTALE},
		{fmt.Errorf("nfs3 WRITE: %w", nfs3.ErrAccess), syscall.EACCES},
		{fmt.Errorf("x: %w", context.Canceled), syscall.EINTR},
		{fmt.Errorf("x: %w", sunrpc.ErrTimeout), syscall.EIO},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), syscall.EIO},
	} {
		if got := toErrno(tt.err); got != tt.want {
			t.Errorf("toErrno(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
