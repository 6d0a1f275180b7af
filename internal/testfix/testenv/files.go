package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// MustWrite writes data to path (mode 0644), creating its parent
// directories (mode 0755); it fails t on any error.
func MustWrite(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
