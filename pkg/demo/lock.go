package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockWait bounds how long pod-b's blocking lock may wait once pod-a has
// released: the server's GRANTED callback, or the mount's re-sent LOCK
// (about once a second) when the callback cannot reach it.
const lockWait = 30 * time.Second

// lockAcrossPods shows that a POSIX record lock taken through one pod's
// mount is seen through another pod's mount of the same volume, as NLM
// carries it to the server (RFC 8267 section 5.1): pod-a write-locks a
// file, pod-b's F_SETLK is refused (EAGAIN) and its F_GETLK names the
// lock, pod-b's F_SETLKW waits until pod-a unlocks, then holds the lock.
// It returns what it saw, or an error naming the step that went wrong.
func lockAcrossPods(ctx context.Context, targetA, targetB string) (string, error) {
	const name = "demo.lock"
	fa, err := os.OpenFile(filepath.Join(targetA, name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", err
	}
	defer os.Remove(fa.Name())
	defer fa.Close()
	fb, err := os.OpenFile(filepath.Join(targetB, name), os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer fb.Close()
	whole := func(typ int16) *syscall.Flock_t { return &syscall.Flock_t{Type: typ, Whence: 0, Start: 0, Len: 0} }

	if err := syscall.FcntlFlock(fa.Fd(), syscall.F_SETLK, whole(syscall.F_WRLCK)); err != nil {
		return "", fmt.Errorf("pod-a F_SETLK write lock: %w", err)
	}
	err = syscall.FcntlFlock(fb.Fd(), syscall.F_SETLK, whole(syscall.F_WRLCK))
	if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EACCES) {
		return "", fmt.Errorf("pod-b F_SETLK while pod-a holds the lock: %v, want EAGAIN", err)
	}
	probe := whole(syscall.F_WRLCK)
	if err := syscall.FcntlFlock(fb.Fd(), syscall.F_GETLK, probe); err != nil {
		return "", fmt.Errorf("pod-b F_GETLK: %w", err)
	}
	if probe.Type != syscall.F_WRLCK {
		return "", fmt.Errorf("pod-b F_GETLK sees lock type %d, want pod-a's write lock", probe.Type)
	}

	got := make(chan error, 1)
	go func() { got <- syscall.FcntlFlock(fb.Fd(), syscall.F_SETLKW, whole(syscall.F_WRLCK)) }()
	select {
	case err := <-got:
		return "", fmt.Errorf("pod-b F_SETLKW returned (%v) while pod-a still holds the lock", err)
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	released := time.Now()
	if err := syscall.FcntlFlock(fa.Fd(), syscall.F_SETLK, whole(syscall.F_UNLCK)); err != nil {
		return "", fmt.Errorf("pod-a unlock: %w", err)
	}
	select {
	case err := <-got:
		if err != nil {
			return "", fmt.Errorf("pod-b F_SETLKW: %w", err)
		}
	case <-time.After(lockWait):
		fb.Close() // ends the wait (the lock is released with the file)
		return "", fmt.Errorf("pod-b F_SETLKW still waiting %v after pod-a unlocked", lockWait)
	case <-ctx.Done():
		fb.Close()
		return "", ctx.Err()
	}
	waited := time.Since(released)
	if err := syscall.FcntlFlock(fb.Fd(), syscall.F_SETLK, whole(syscall.F_UNLCK)); err != nil {
		return "", fmt.Errorf("pod-b unlock: %w", err)
	}
	return fmt.Sprintf("pod-a's write lock refused pod-b (EAGAIN, F_GETLK saw it); pod-b's F_SETLKW got the lock %v after pod-a unlocked",
		waited.Round(time.Millisecond)), nil
}
