package kernelpeer

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Monitor sends one command to the qemu human monitor of the running peer
// ($KERNEL_PEER_DIR/run/monitor.sock) and returns what it printed before
// the next "(qemu) " prompt, without the echo of the command. The monitor
// serves one connection at a time; a busy monitor is waited for up to 10 s.
func Monitor(t testing.TB, cmd string) string {
	t.Helper()
	sock := filepath.Join(dir(), "run", "monitor.sock")
	var c net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err = net.DialTimeout("unix", sock, time.Second); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("qemu monitor of the kernel peer: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	r := bufio.NewReader(c)
	untilPrompt := func() (string, error) {
		var b strings.Builder
		for !strings.HasSuffix(b.String(), "(qemu) ") {
			ch, err := r.ReadByte()
			if err != nil {
				return b.String(), err
			}
			b.WriteByte(ch)
		}
		return strings.TrimSuffix(b.String(), "(qemu) "), nil
	}
	if _, err := untilPrompt(); err != nil {
		t.Fatalf("qemu monitor: no prompt: %v", err)
	}
	if _, err := fmt.Fprintf(c, "%s\n", cmd); err != nil {
		t.Fatalf("qemu monitor: %s: %v", cmd, err)
	}
	out, err := untilPrompt()
	if err != nil {
		t.Fatalf("qemu monitor: %s: %v (got %q)", cmd, err, out)
	}
	// the monitor echoes the command line (with terminal escapes) first
	if _, rest, ok := strings.Cut(out, "\n"); ok {
		out = rest
	}
	return strings.ReplaceAll(out, "\r", "")
}

// Forward makes guestPort (TCP, on the guest's address) reachable at
// 127.0.0.1:hostPort through qemu's user-mode network (monitor
// hostfwd_add) and returns hostPort, a port free a moment ago. The
// forward is removed when t ends. Connections through it arrive in the
// guest from 10.0.2.2.
func Forward(t testing.TB, guestPort int) int {
	t.Helper()
	for try := 0; ; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hostPort := l.Addr().(*net.TCPAddr).Port
		l.Close()
		rule := fmt.Sprintf("tcp:127.0.0.1:%d", hostPort)
		out := Monitor(t, "hostfwd_add "+rule+"-:"+strconv.Itoa(guestPort))
		if strings.TrimSpace(out) != "" {
			if try < 3 { // the port was taken meanwhile
				continue
			}
			t.Fatalf("kernel peer: hostfwd_add %s-:%d: %s", rule, guestPort, out)
		}
		t.Cleanup(func() {
			if out := Monitor(t, "hostfwd_remove "+rule); !strings.Contains(out, "removed") {
				t.Errorf("kernel peer: hostfwd_remove %s: %q", rule, out)
			}
		})
		return hostPort
	}
}

// GuestPort returns the TCP port the guest's rpcbind reports for program
// prog version vers (rpcinfo -p in the guest); it fails t when none is
// registered.
func GuestPort(t testing.TB, prog, vers int) int {
	t.Helper()
	out := Sh(t, "rpcinfo -p")
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && f[0] == strconv.Itoa(prog) && f[1] == strconv.Itoa(vers) && f[2] == "tcp" {
			if p, err := strconv.Atoi(f[3]); err == nil {
				return p
			}
		}
	}
	t.Fatalf("kernel peer: program %d version %d not registered over TCP with the guest's rpcbind:\n%s", prog, vers, out)
	return 0
}

// dir is the peer's state directory: $KERNEL_PEER_DIR, default
// /tmp/kernel-peer.
func dir() string {
	if d := os.Getenv("KERNEL_PEER_DIR"); d != "" {
		return d
	}
	return "/tmp/kernel-peer"
}
