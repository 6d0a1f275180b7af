package mounter

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain runs the test binary as a stand-in for `driver mount` when the
// mounter under test starts it (its first argument is then "mount"), so
// that the server is tested with real processes, fds and pipes but
// without NFS or FUSE.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "mount" {
		os.Exit(helperMain(os.Args[2:]))
	}
	if len(os.Args) == 4 && os.Args[1] == "lockhelper" {
		os.Exit(lockHelperMain(os.Args[2], os.Args[3]))
	}
	os.Exit(m.Run())
}

// helperMain is the stand-in mount process. Its behaviour is chosen by
// --helper=MODE (passed through Server.ExtraArgs):
//
//	serve     copy fd 3's content to TARGET/fd3 and the arguments to
//	          TARGET/args, answer "ok" on fd 4, then serve until SIGTERM
//	          or until TARGET is removed (the "unmount")
//	stubborn  like serve, but SIGTERM is ignored
//	fail      answer "error: NFS MOUNT refused: access denied", exit 1
//	early     write "boom: server unreachable" to stderr, exit 3 without
//	          answering
//	hang      never answer; serve until killed
//	recovercrash  like serve, but the first process started with
//	          --recover for TARGET (no TARGET/recovercrash yet) answers
//	          "ok" and is killed (SIGKILL) right after
//
// Every mode exits when its parent (the test binary) is gone.
func helperMain(args []string) int {
	mode := ""
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case strings.HasPrefix(a, "--helper="):
			mode = strings.TrimPrefix(a, "--helper=")
		case a == "-o" || a == "--machine-name":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		fmt.Fprintln(os.Stderr, "helper: want SOURCE TARGET, got", pos)
		return 2
	}
	target := pos[1]
	ppid := os.Getppid()
	ready := os.NewFile(4, "ready")
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	switch mode {
	case "fail":
		fmt.Fprintln(ready, "error: NFS MOUNT refused: access denied")
		return 1
	case "early":
		fmt.Fprintln(os.Stderr, "boom: server unreachable")
		return 3
	case "hang":
	case "serve", "stubborn", "recovercrash":
		if mode == "stubborn" {
			signal.Ignore(syscall.SIGTERM)
		}
		b := make([]byte, 4096)
		n, err := syscall.Pread(3, b, 0)
		if err != nil {
			fmt.Fprintln(ready, "error: fd 3:", err)
			return 1
		}
		if err := os.WriteFile(filepath.Join(target, "fd3"), b[:n], 0o600); err != nil {
			fmt.Fprintln(ready, "error:", err)
			return 1
		}
		if err := os.WriteFile(filepath.Join(target, "args"), []byte(strings.Join(os.Args, "\n")), 0o600); err != nil {
			fmt.Fprintln(ready, "error:", err)
			return 1
		}
		crash := false
		if mode == "recovercrash" && strings.Contains(strings.Join(args, " "), "--recover") {
			f, err := os.OpenFile(filepath.Join(target, "recovercrash"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err == nil {
				f.Close()
				crash = true
			}
		}
		fmt.Fprintln(ready, "ok")
		ready.Close()
		if crash {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	default:
		fmt.Fprintln(os.Stderr, "helper: unknown mode", mode)
		return 2
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-term:
			return 0
		case <-tick.C:
		}
		if os.Getppid() != ppid {
			return 0
		}
		if mode != "hang" {
			if _, err := os.Stat(target); err != nil {
				return 0
			}
		}
	}
}

// lockHelperMain is a process locking path (the test binary run as
// "lockhelper PATH MODE"), so that each lock has its own process and so
// its own svid on the wire. MODE:
//
//	hold  F_SETLK a write lock on the whole file, say "locked"; at a line
//	      on stdin unlock and say "unlocked"
//	wait  say "waiting", F_SETLKW a write lock on the whole file, say
//	      "granted"
//
// Errors are said as "error: ...". It exits at the end of stdin (its
// parent gone), which releases its lock.
func lockHelperMain(path, mode string) int {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	wr := &syscall.Flock_t{Type: syscall.F_WRLCK}
	in := bufio.NewReader(os.Stdin)
	switch mode {
	case "hold":
		if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, wr); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("locked")
		if _, err := in.ReadString('\n'); err != nil {
			return 0
		}
		if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: syscall.F_UNLCK}); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("unlocked")
	case "wait":
		fmt.Println("waiting")
		if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLKW, wr); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("granted")
	default:
		fmt.Println("error: mode", mode)
		return 2
	}
	_, _ = io.Copy(io.Discard, in)
	return 0
}
