package sunrpc_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// TestPortmapRPCBind registers, looks up and unregisters a mapping with
// the host's rpcbind (Debian's), in the user-defined program range.
func TestPortmapRPCBind(t *testing.T) {
	addr := testenv.NeedRPCBind(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prog := uint32(0x20000000 + os.Getpid()%0x1000000)
	m := sunrpc.Mapping{Prog: prog, Vers: 3, Prot: sunrpc.IPProtoTCP, Port: 40123}
	sunrpc.PortmapUnset(ctx, addr, m) // left by a killed run
	if p, err := sunrpc.PortmapGetPort(ctx, addr, m); err != nil || p != 0 {
		t.Fatalf("GETPORT before SET: %d %v", p, err)
	}
	if err := sunrpc.PortmapSet(ctx, addr, m); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sunrpc.PortmapUnset(context.Background(), addr, m) })
	if p, err := sunrpc.PortmapGetPort(ctx, addr, m); err != nil || p != 40123 {
		t.Fatalf("GETPORT: %d %v", p, err)
	}
	other := m
	other.Port = 40124
	if err := sunrpc.PortmapSet(ctx, addr, other); !errors.Is(err, sunrpc.ErrPortmapRefused) {
		t.Fatalf("second SET of the same mapping: %v", err)
	}
	if err := sunrpc.PortmapUnset(ctx, addr, m); err != nil {
		t.Fatal(err)
	}
	if p, err := sunrpc.PortmapGetPort(ctx, addr, m); err != nil || p != 0 {
		t.Fatalf("GETPORT after UNSET: %d %v", p, err)
	}
}
