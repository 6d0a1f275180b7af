package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// enableFUSEURing writes 1 to the parameter and checks it, and reports a
// kernel without it.
func TestEnableFUSEURing(t *testing.T) {
	p := filepath.Join(t.TempDir(), "enable_uring")
	if err := os.WriteFile(p, []byte("N\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := enableFUSEURing(p); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "1" {
		t.Errorf("parameter holds %q, want 1", b)
	}
	err := enableFUSEURing(filepath.Join(t.TempDir(), "missing"))
	if err == nil || !strings.Contains(err.Error(), "CONFIG_FUSE_IO_URING") {
		t.Errorf("missing parameter: %v", err)
	}
}
