package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/mounter"
)

// The mounter's readiness probe answers for a mounter of this PID
// namespace that serves its socket, and fails without one.
func TestProbeMounter(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "mounter.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := probeMounter(ctx, sock); err == nil {
		t.Fatal("probe of a socket nobody serves: no error")
	}
	s := &mounter.Server{Socket: sock, StateDir: filepath.Join(dir, "state"), LockSocket: ""}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := probeMounter(ctx, sock)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("probe of a serving mounter: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
