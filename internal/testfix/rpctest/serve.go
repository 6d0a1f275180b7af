// Package rpctest serves ONC RPC programs (pkg/sunrpc) on loopback TCP
// for tests.
package rpctest

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// Serve serves d on a new listener on 127.0.0.1 until the test ends (the
// listener closed, every connection's calls answered) and returns its
// address ("127.0.0.1:port").
func Serve(t testing.TB, d sunrpc.Dispatcher) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sunrpc.ServeTCP(ctx, ln, d, sunrpc.TCPOptions{})
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// Port returns the port of an address Serve returned.
func Port(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
