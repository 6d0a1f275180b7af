package csi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/mounter"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// toStatus maps an error of the NFS client, the admin API or the mounter
// to the gRPC code the CSI spec asks for, keeping the message.
func toStatus(err error, what string) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf(err), what+": "+err.Error())
}

func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, nfs3.ErrNoEnt), errors.Is(err, nfs3.ErrStale), errors.Is(err, admin.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, nfs3.ErrAccess), errors.Is(err, nfs3.ErrPerm), errors.Is(err, admin.ErrUnauthenticated):
		return codes.PermissionDenied
	case errors.Is(err, nfs3.ErrNoSpc), errors.Is(err, nfs3.ErrDQuot):
		return codes.ResourceExhausted
	case errors.Is(err, nfs3.ErrExist), errors.Is(err, admin.ErrExists):
		return codes.AlreadyExists
	case errors.Is(err, admin.ErrInvalid):
		return codes.InvalidArgument
	case errors.Is(err, admin.ErrPrecondition), errors.Is(err, nfs3.ErrNotDir):
		return codes.FailedPrecondition
	case errors.Is(err, client.ErrMountFailed), errors.Is(err, mounter.ErrMount):
		return codes.Internal
	case errors.Is(err, sunrpc.ErrConnLost), errors.Is(err, sunrpc.ErrTimeout), errors.Is(err, sunrpc.ErrClosed):
		return codes.Unavailable
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) {
		return codes.Unavailable
	}
	return codes.Internal
}
