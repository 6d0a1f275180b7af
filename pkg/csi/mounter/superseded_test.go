package mounter

import (
	"os"
	"testing"
)

// A mounter whose process exits after handing its mount to another
// mounter's process (a rolling update: both pods share the state
// directory) leaves the state file that records the successor; one whose
// process ends its mount removes the mount's state file. Each process's
// metrics socket is its own and goes with it.
func TestForgetLeavesSuccessorsState(t *testing.T) {
	dir := t.TempDir()
	s := &Server{StateDir: dir, mounts: map[string]*proc{}}
	target := "/var/lib/kubelet/pods/p/volumes/v/mount"
	for _, tc := range []struct {
		name      string
		recorded  int // PID in the state file
		wantState bool
	}{
		{"handed over", 2222, true},
		{"ended", 1111, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := dir + "/" + tc.name + ".metrics.sock"
			if err := os.WriteFile(sock, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			p := &proc{m: Mount{Target: target, Source: "srv:/v", PID: 1111, MetricsSocket: sock}, done: make(chan struct{})}
			s.mounts[target] = p
			s.writeState(Mount{Target: target, Source: "srv:/v", PID: tc.recorded})
			if got := s.superseded(p); got != tc.wantState {
				t.Errorf("superseded: %v, want %v", got, tc.wantState)
			}
			s.forget(p)
			_, err := os.Stat(s.statePath(target))
			if (err == nil) != tc.wantState {
				t.Errorf("state file kept: %v, want %v", err == nil, tc.wantState)
			}
			if _, err := os.Stat(sock); !os.IsNotExist(err) {
				t.Errorf("the exited process's metrics socket is left: %v", err)
			}
			if _, ok := s.mounts[target]; ok {
				t.Error("the exited process is still listed")
			}
			_ = os.Remove(s.statePath(target))
		})
	}
}
