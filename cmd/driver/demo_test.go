package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/demo"
)

// TestDemoArgs: bad flags of `driver demo` are errors that name the flag,
// before anything is checked or started (no root needed). The demo itself
// runs in pkg/demo's tests.
func TestDemoArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--transport", "udp"}, `--transport "udp": want rdma or tcp`},
		{[]string{"--size", "lots"}, `size "lots": want a number of bytes`},
		{[]string{"--size", "10 parsecs"}, `unknown unit "parsecs"`},
		{[]string{"--size", "1KiB"}, "--size 1024 bytes: want at least 1.00 MiB"},
		{[]string{"--size", "0"}, "must not be 0"},
		{[]string{"--files", "0"}, "must not be 0"},
		{[]string{"--files", "-1"}, "--files -1: want 1..1024"},
		{[]string{"--credits", "0"}, "must not be 0"},
		{[]string{"--credits", "2000"}, "--credits 2000"},
		{[]string{"--transport", "tcp", "--credits", "8"}, "needs --transport rdma"},
		{[]string{"extra"}, `unknown command "extra"`},
	} {
		_, err := execute(t, testenv.Context(t, 30*time.Second), append([]string{"demo"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("demo %v: %v; want an error with %q", c.args, err, c.want)
		}
		if err != nil && c.args[0] != "extra" && !errors.Is(err, demo.ErrUsage) {
			t.Errorf("demo %v: %v is not demo.ErrUsage", c.args, err)
		}
	}
}
