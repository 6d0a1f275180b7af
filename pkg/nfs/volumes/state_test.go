package volumes

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// TestStateFileBadCredits: New refuses a state file whose credit grants
// SetCredits would refuse (a grant below 1, a bad machine name).
func TestStateFileBadCredits(t *testing.T) {
	for _, credits := range []string{`{"pod-a": 0}`, `{"": 4}`, `{"` + strings.Repeat("m", admin.MaxMachineName+1) + `": 4}`} {
		root, state := t.TempDir(), t.TempDir()
		testenv.MustWrite(t, filepath.Join(state, StateFileName), []byte(`{"version": 1, "volumes": [], "snapshots": [], "clones": [], "credits": `+credits+`}`))
		reg, err := New(Options{Root: root, StateDir: state})
		if err == nil {
			reg.Close()
			t.Fatalf("New with credits %.40s: no error", credits)
		}
		if !errors.Is(err, admin.ErrInvalid) || !strings.Contains(err.Error(), "state file") {
			t.Errorf("New with credits %.40s: %v, want a state file error wrapping ErrInvalid", credits, err)
		}
	}
}
