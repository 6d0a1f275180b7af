package sunrpc

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

func TestCallHeaderRoundTrip(t *testing.T) {
	sys := AuthSysParams{Stamp: 7, MachineName: "host", UID: 1, GID: 2, GIDs: []uint32{3}}
	cred, err := sys.Credential()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []CallHeader{
		{XID: 1, RPCVers: 2, Prog: 100003, Vers: 3, Proc: 6},
		{XID: 0xffffffff, RPCVers: 2, Prog: 100005, Vers: 3, Proc: 1, Cred: cred},
		{XID: 9, RPCVers: 2, Cred: OpaqueAuth{Flavor: 42, Body: make([]byte, MaxAuthBytes)}, Verf: OpaqueAuth{Flavor: 3, Body: []byte{1, 2, 3}}},
	} {
		e := xdr.NewEncoder(nil)
		h.Encode(e)
		e.Uint32(0xa5a5a5a5) // first argument word
		d := xdr.NewDecoder(e.Bytes())
		got, err := DecodeCallHeader(d)
		if err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		if got.XID != h.XID || got.Prog != h.Prog || got.Vers != h.Vers || got.Proc != h.Proc ||
			got.Cred.Flavor != h.Cred.Flavor || !bytes.Equal(got.Cred.Body, h.Cred.Body) ||
			got.Verf.Flavor != h.Verf.Flavor || !bytes.Equal(got.Verf.Body, h.Verf.Body) {
			t.Fatalf("got %+v, want %+v", got, h)
		}
		if v := d.Uint32(); v != 0xa5a5a5a5 {
			t.Fatalf("decoder left at the wrong place: %#x", v)
		}
	}
}

func TestDecodeCallHeaderErrors(t *testing.T) {
	good := CallHeader{XID: 5, RPCVers: 2, Prog: 1, Vers: 1, Proc: 1}
	enc := func(h CallHeader) []byte { return encodeCall(h) }
	long := good
	long.Cred = OpaqueAuth{Flavor: AuthSys, Body: make([]byte, MaxAuthBytes+4)}
	longVerf := good
	longVerf.Verf = OpaqueAuth{Body: make([]byte, MaxAuthBytes+1)}
	v3 := good
	v3.RPCVers = 3
	reply := enc(good)
	reply[7] = 1 // msg_type REPLY
	full := enc(good)
	tests := []struct {
		name string
		in   []byte
		want error
		auth AuthStat
	}{
		{"empty", nil, ErrMalformed, 0},
		{"xid only", full[:4], ErrMalformed, 0},
		{"not a call", reply, ErrMalformed, 0},
		{"truncated before proc", full[:20], ErrMalformed, 0},
		{"rpcvers 3", enc(v3), ErrRPCMismatch, 0},
		{"cred too long", enc(long), ErrAuth, AuthBadCred},
		{"cred truncated", full[:26], ErrAuth, AuthBadCred},
		{"verf truncated", full[:34], ErrAuth, AuthBadVerf},
		{"verf too long", enc(longVerf), ErrAuth, AuthBadVerf},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := DecodeCallHeader(xdr.NewDecoder(tt.in))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var ae *AuthError
			if tt.auth != 0 {
				if !errors.As(err, &ae) || ae.Stat != tt.auth {
					t.Fatalf("err = %v, want auth_stat %v", err, tt.auth)
				}
				if h.XID != 5 || h.Proc != 1 {
					t.Fatalf("header fields not kept: %+v", h)
				}
			}
			var me *MismatchError
			if tt.want == ErrRPCMismatch && (!errors.As(err, &me) || me.Low != 2 || me.High != 2 || h.XID != 5) {
				t.Fatalf("err = %v, h = %+v", err, h)
			}
		})
	}
}

func TestReplyHeaderRoundTrip(t *testing.T) {
	tests := []struct {
		h    ReplyHeader
		want error
	}{
		{ReplyHeader{XID: 1, Stat: MsgAccepted, Accept: Success}, nil},
		{ReplyHeader{XID: 2, Stat: MsgAccepted, Verf: OpaqueAuth{Flavor: AuthShort, Body: []byte{1, 2, 3, 4, 5}}, Accept: Success}, nil},
		{ReplyHeader{XID: 3, Stat: MsgAccepted, Accept: ProgUnavail}, ErrProgUnavail},
		{ReplyHeader{XID: 4, Stat: MsgAccepted, Accept: ProgMismatch, Low: 2, High: 4}, ErrProgMismatch},
		{ReplyHeader{XID: 5, Stat: MsgAccepted, Accept: ProcUnavail}, ErrProcUnavail},
		{ReplyHeader{XID: 6, Stat: MsgAccepted, Accept: GarbageArgs}, ErrGarbageArgs},
		{ReplyHeader{XID: 7, Stat: MsgAccepted, Accept: SystemErr}, ErrSystemErr},
		{ReplyHeader{XID: 8, Stat: MsgDenied, Reject: RejectRPCMismatch, Low: 2, High: 2}, ErrRPCMismatch},
		{ReplyHeader{XID: 9, Stat: MsgDenied, Reject: RejectAuthError, Auth: AuthTooWeak}, ErrAuth},
		{ReplyHeader{XID: 10, Stat: MsgDenied, Reject: RejectAuthError, Auth: 99}, ErrAuth},
	}
	for _, tt := range tests {
		e := xdr.NewEncoder(nil)
		tt.h.Encode(e)
		e.Uint32(0x11223344)
		d := xdr.NewDecoder(e.Bytes())
		got, err := DecodeReplyHeader(d)
		if err != nil {
			t.Fatalf("%+v: %v", tt.h, err)
		}
		if got.Verf.Body == nil {
			got.Verf.Body = tt.h.Verf.Body[:0:0]
		}
		if tt.h.Verf.Body == nil {
			tt.h.Verf.Body = got.Verf.Body
		}
		if !reflect.DeepEqual(got, tt.h) {
			t.Fatalf("got %+v, want %+v", got, tt.h)
		}
		if v := d.Uint32(); v != 0x11223344 {
			t.Fatalf("decoder left at the wrong place: %#x", v)
		}
		err = got.Err()
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Fatalf("Err() = %v, want %v", err, tt.want)
		}
		var me *MismatchError
		if errors.As(err, &me) && (me.Low != tt.h.Low || me.High != tt.h.High) {
			t.Fatalf("mismatch %d..%d", me.Low, me.High)
		}
		var ae *AuthError
		if errors.As(err, &ae) && ae.Stat != tt.h.Auth {
			t.Fatalf("auth_stat %v", ae.Stat)
		}
	}
}

func TestDecodeReplyHeaderErrors(t *testing.T) {
	words := func(w ...uint32) []byte {
		e := xdr.NewEncoder(nil)
		for _, v := range w {
			e.Uint32(v)
		}
		return e.Bytes()
	}
	for name, in := range map[string][]byte{
		"empty":              nil,
		"call not reply":     words(1, 0, 0),
		"bad reply_stat":     words(1, 1, 2),
		"bad accept_stat":    words(1, 1, 0, 0, 0, 6),
		"bad reject_stat":    words(1, 1, 1, 2),
		"truncated mismatch": words(1, 1, 0, 0, 0, 2, 1),
		"truncated auth":     words(1, 1, 1, 1),
		"verf too long":      words(1, 1, 0, 0, 401),
	} {
		if _, err := DecodeReplyHeader(xdr.NewDecoder(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

func TestStatStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Success.String(), "SUCCESS"}, {SystemErr.String(), "SYSTEM_ERR"}, {AcceptStat(9).String(), "accept_stat(9)"},
		{AuthTooWeak.String(), "AUTH_TOOWEAK"}, {RPCSecGSSCtxProblem.String(), "RPCSEC_GSS_CTXPROBLEM"}, {AuthStat(77).String(), "auth_stat(77)"},
		{AuthSys.String(), "AUTH_SYS"}, {AuthFlavor(9).String(), "auth_flavor(9)"},
		{(&AuthError{Stat: AuthBadCred}).Error(), "sunrpc: authentication error: AUTH_BADCRED"},
		{(&MismatchError{Err: ErrProgMismatch, Low: 2, High: 3}).Error(), "sunrpc: program version mismatch (supported 2..3)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
