package unixsock

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// A successor binds the same path while the first listener runs; the
// first one's Close leaves the successor's socket, which still accepts.
func TestCloseLeavesSuccessorsSocket(t *testing.T) {
	for _, network := range []string{"unix", "unixpacket"} {
		t.Run(network, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.sock")
			old, err := Listen(network, path, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if !old.Owns() {
				t.Fatal("a fresh listener does not own its path")
			}
			next, err := Listen(network, path, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer next.Close()
			if old.Owns() {
				t.Fatal("the first listener still owns the path its successor bound")
			}
			if err := old.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(path); err != nil {
				t.Fatalf("the first listener's Close removed its successor's socket: %v", err)
			}
			c, err := net.Dial(network, path)
			if err != nil {
				t.Fatalf("dial the successor: %v", err)
			}
			defer c.Close()
			a, err := next.Accept()
			if err != nil {
				t.Fatal(err)
			}
			a.Close()
			if err := next.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Fatalf("the last listener's Close left its socket: %v", err)
			}
			if err := next.Close(); err != nil {
				t.Fatalf("a second Close: %v", err)
			}
		})
	}
}

// A stale non-socket file at the path is not removed: the bind fails.
func TestListenKeepsOtherFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err := Listen("unix", path, 0o600); err == nil {
		l.Close()
		t.Fatal("listened over a regular file")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "x" {
		t.Fatalf("the regular file was changed: %q, %v", b, err)
	}
}
