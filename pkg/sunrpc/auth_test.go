package sunrpc

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

func TestAuthSysRoundTrip(t *testing.T) {
	for _, p := range []AuthSysParams{
		{},
		{Stamp: 1, MachineName: "a", UID: 0, GID: 0, GIDs: []uint32{}},
		{Stamp: 0xffffffff, MachineName: strings.Repeat("n", MaxMachineName), UID: 65534, GID: 65534, GIDs: make([]uint32, MaxAuthSysGIDs)},
	} {
		cred, err := p.Credential()
		if err != nil {
			t.Fatal(err)
		}
		if cred.Flavor != AuthSys || len(cred.Body) > MaxAuthBytes {
			t.Fatalf("cred %v of %d bytes", cred.Flavor, len(cred.Body))
		}
		var got AuthSysParams
		if err := DecodeAuthSys(cred.Body, &got); err != nil {
			t.Fatal(err)
		}
		if len(p.GIDs) == 0 && len(got.GIDs) == 0 {
			p.GIDs, got.GIDs = nil, nil
		}
		if !reflect.DeepEqual(got, p) {
			t.Fatalf("got %+v, want %+v", got, p)
		}
	}
}

func TestAuthSysLimits(t *testing.T) {
	for _, p := range []AuthSysParams{
		{MachineName: strings.Repeat("n", MaxMachineName+1)},
		{GIDs: make([]uint32, MaxAuthSysGIDs+1)},
	} {
		if _, err := p.Credential(); err == nil {
			t.Errorf("%d-byte name, %d gids: no error", len(p.MachineName), len(p.GIDs))
		}
		if _, err := NewClient(nil, ClientOptions{AuthSys: &p}); err == nil {
			t.Errorf("NewClient accepted %d-byte name, %d gids", len(p.MachineName), len(p.GIDs))
		}
	}
	enc := func(f func(e *xdr.Encoder)) []byte {
		e := xdr.NewEncoder(nil)
		f(e)
		return e.Bytes()
	}
	for name, body := range map[string][]byte{
		"empty": nil,
		"name 256": enc(func(e *xdr.Encoder) {
			e.Uint32(0)
			e.String(strings.Repeat("x", 256))
			e.Uint32(0)
			e.Uint32(0)
			e.Uint32(0)
		}),
		"17 gids": enc(func(e *xdr.Encoder) {
			e.Uint32(0)
			e.String("h")
			e.Uint32(0)
			e.Uint32(0)
			e.Uint32(17)
			e.Fixed(make([]byte, 68))
		}),
		"gids short": enc(func(e *xdr.Encoder) {
			e.Uint32(0)
			e.String("h")
			e.Uint32(0)
			e.Uint32(0)
			e.Uint32(2)
			e.Uint32(1)
		}),
		"trailing": enc(func(e *xdr.Encoder) {
			e.Uint32(0)
			e.String("h")
			e.Uint32(0)
			e.Uint32(0)
			e.Uint32(0)
			e.Uint32(0)
		}),
	} {
		var p AuthSysParams
		if err := DecodeAuthSys(body, &p); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

// A long-lived AuthSysParams decodes the same credential without allocating.
func TestDecodeAuthSysNoAlloc(t *testing.T) {
	p := AuthSysParams{Stamp: 3, MachineName: "node-17", UID: 1000, GID: 100, GIDs: []uint32{4, 24, 27}}
	cred, _ := p.Credential()
	var got AuthSysParams
	if err := DecodeAuthSys(cred.Body, &got); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = DecodeAuthSys(cred.Body, &got) }); n != 0 {
		t.Fatalf("%v allocations per decode", n)
	}
}
