package client

import (
	"context"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// Cred is an AUTH_SYS identity (RFC 5531 appendix A) encoded once, for the
// calls of one user.
type Cred struct{ auth sunrpc.OpaqueAuth }

// NewCred encodes p (machine name <= 255 bytes, at most 16 groups).
func NewCred(p sunrpc.AuthSysParams) (*Cred, error) {
	a, err := p.Credential()
	if err != nil {
		return nil, err
	}
	return &Cred{auth: a}, nil
}

type credKey struct{}

// WithCred returns a context whose NFS calls carry cred instead of the
// mount's credential (Options.AuthSys): a multi-user consumer, such as the
// FUSE layer, makes each call as the user it serves, so that the server's
// permission checks apply to that user. A nil cred leaves ctx unchanged.
func WithCred(ctx context.Context, cred *Cred) context.Context {
	if cred == nil {
		return ctx
	}
	return context.WithValue(ctx, credKey{}, cred)
}

// CredFrom returns the credential WithCred put in ctx, or nil.
func CredFrom(ctx context.Context) *Cred {
	c, _ := ctx.Value(credKey{}).(*Cred)
	return c
}

// credOf returns the wire credential WithCred put in ctx, or nil.
func credOf(ctx context.Context) *sunrpc.OpaqueAuth {
	if c := CredFrom(ctx); c != nil {
		return &c.auth
	}
	return nil
}
