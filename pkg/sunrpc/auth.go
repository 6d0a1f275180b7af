package sunrpc

import (
	"errors"
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Limits of an AUTH_SYS credential (RFC 5531 appendix A).
const (
	MaxMachineName = 255 // bytes of authsys_parms.machinename
	MaxAuthSysGIDs = 16  // entries of authsys_parms.gids
)

// AuthSysParams is authsys_parms, the body of an AUTH_SYS credential (RFC
// 5531 appendix A): an arbitrary stamp, the caller's host name (at most
// MaxMachineName bytes), effective uid and gid, and at most MaxAuthSysGIDs
// supplementary gids.
type AuthSysParams struct {
	Stamp       uint32
	MachineName string
	UID, GID    uint32
	GIDs        []uint32
}

// Validate reports whether p fits the limits of RFC 5531 appendix A.
func (p *AuthSysParams) Validate() error {
	if len(p.MachineName) > MaxMachineName {
		return fmt.Errorf("sunrpc: AUTH_SYS machinename is %d bytes, at most %d", len(p.MachineName), MaxMachineName)
	}
	if len(p.GIDs) > MaxAuthSysGIDs {
		return fmt.Errorf("sunrpc: AUTH_SYS has %d gids, at most %d", len(p.GIDs), MaxAuthSysGIDs)
	}
	return nil
}

// Encode appends p to e (20 bytes plus the padded name plus 4 per gid; at
// most 340 bytes when p is valid, under MaxAuthBytes).
func (p *AuthSysParams) Encode(e *xdr.Encoder) {
	e.Uint32(p.Stamp)
	e.String(p.MachineName)
	e.Uint32(p.UID)
	e.Uint32(p.GID)
	e.Uint32(uint32(len(p.GIDs)))
	for _, g := range p.GIDs {
		e.Uint32(g)
	}
}

// Credential returns p as an AUTH_SYS opaque_auth, or an error when p breaks
// the limits of RFC 5531 appendix A.
func (p *AuthSysParams) Credential() (OpaqueAuth, error) {
	if err := p.Validate(); err != nil {
		return OpaqueAuth{}, err
	}
	e := xdr.NewEncoder(make([]byte, 0, 64))
	p.Encode(e)
	return OpaqueAuth{Flavor: AuthSys, Body: e.Bytes()}, nil
}

// DecodeAuthSys parses body, the body of an AUTH_SYS credential, into p. It
// reuses p.GIDs' storage, and p.MachineName when the name is unchanged, so
// that a long-lived p decodes without allocating. The whole body must be
// consumed. Errors wrap ErrMalformed and the xdr error: a name over
// MaxMachineName bytes, more than MaxAuthSysGIDs gids, truncation, trailing
// bytes.
func DecodeAuthSys(body []byte, p *AuthSysParams) error {
	var d xdr.Decoder
	d.Reset(body)
	p.Stamp = d.Uint32()
	name := d.Opaque(MaxMachineName)
	p.UID = d.Uint32()
	p.GID = d.Uint32()
	n := d.Uint32()
	if d.Err() == nil && n > MaxAuthSysGIDs {
		d.SetErr(fmt.Errorf("%w: %d gids > %d", xdr.ErrTooLong, n, MaxAuthSysGIDs))
	}
	p.GIDs = p.GIDs[:0]
	for i := uint32(0); i < n && d.Err() == nil; i++ {
		p.GIDs = append(p.GIDs, d.Uint32())
	}
	if d.Err() == nil && d.Remaining() != 0 {
		d.SetErr(fmt.Errorf("%d trailing bytes", d.Remaining()))
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("%w: AUTH_SYS credential: %w", ErrMalformed, err)
	}
	if string(name) != p.MachineName { // compiled without allocation
		p.MachineName = string(name)
	}
	return nil
}

// Credential is a call's credential as the server sees it, checked and
// parsed (RFC 5531 section 8.2, appendix A).
type Credential struct {
	Flavor AuthFlavor
	Body   []byte        // raw opaque_auth body; aliases the request
	Sys    AuthSysParams // valid when Flavor == AuthSys
}

// parse checks the credential and verifier of a call under the server's
// policy. accept reports which flavors the server takes; startTLS that the
// transport offers RPC-with-TLS to this call (RFC 9289 section 4.1).
func (c *Credential) parse(cred, verf OpaqueAuth, accept func(AuthFlavor) bool, isNull, startTLS bool) error {
	c.Flavor = cred.Flavor
	c.Body = cred.Body
	switch cred.Flavor {
	case AuthTLS:
		// RFC 9289 section 4.1: AUTH_TLS is only the STARTTLS probe, a NULL
		// call with an empty body; anything else, and a probe where the
		// transport does not offer TLS (no TLS configured, a session already
		// up, other calls before it), is AUTH_BADCRED, the answer of a
		// server that does not know the flavor.
		switch {
		case !startTLS:
			return &AuthError{Stat: AuthBadCred, Err: errors.New("AUTH_TLS probe where RPC-with-TLS is not offered")}
		case !isNull:
			return &AuthError{Stat: AuthBadCred, Err: errors.New("AUTH_TLS credential on a procedure other than NULL")}
		case len(cred.Body) != 0:
			return &AuthError{Stat: AuthBadCred, Err: fmt.Errorf("%w: AUTH_TLS credential has a %d-byte body", ErrMalformed, len(cred.Body))}
		case verf.Flavor != AuthNone || len(verf.Body) != 0:
			return &AuthError{Stat: AuthBadVerf, Err: fmt.Errorf("verifier %v with %d bytes for AUTH_TLS credential", verf.Flavor, len(verf.Body))}
		}
		return nil
	case AuthNone:
		// RFC 5531 section 10.1: the AUTH_NONE body is empty. The NULL procedure
		// is always reachable with AUTH_NONE (section 12.1).
		if len(cred.Body) != 0 {
			return &AuthError{Stat: AuthBadCred, Err: fmt.Errorf("%w: AUTH_NONE credential has a %d-byte body", ErrMalformed, len(cred.Body))}
		}
	case AuthSys:
		if err := DecodeAuthSys(cred.Body, &c.Sys); err != nil {
			return &AuthError{Stat: AuthBadCred, Err: err}
		}
	default:
		return &AuthError{Stat: AuthBadCred, Err: fmt.Errorf("unsupported credential flavor %v", cred.Flavor)}
	}
	// AUTH_NONE and AUTH_SYS calls carry an AUTH_NONE verifier.
	if verf.Flavor != AuthNone || len(verf.Body) != 0 {
		return &AuthError{Stat: AuthBadVerf, Err: fmt.Errorf("verifier %v with %d bytes for %v credential", verf.Flavor, len(verf.Body), cred.Flavor)}
	}
	if !accept(cred.Flavor) && !(isNull && cred.Flavor == AuthNone) {
		return &AuthError{Stat: AuthTooWeak, Err: fmt.Errorf("credential flavor %v not accepted", cred.Flavor)}
	}
	return nil
}
