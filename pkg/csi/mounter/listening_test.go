package mounter

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// A handover socket counts as listened on while a process listens on it,
// not once its listener is gone and only the file is left (what a mount
// process killed with SIGKILL leaves).
func TestListeningHandoverSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "hl-") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "m.handover.sock")
	m := Mount{HandoverSocket: path}
	if listening(m) {
		t.Fatal("listening before any socket exists")
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	if !listening(m) {
		t.Fatal("not listening while a listener is bound to the socket")
	}
	l.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the socket file should stay: %v", err)
	}
	if listening(m) {
		t.Fatal("listening after the listener closed, with only the file left")
	}
	if listening(Mount{}) {
		t.Fatal("listening without a handover socket")
	}
}
