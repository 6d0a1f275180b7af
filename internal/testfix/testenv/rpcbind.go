package testenv

import (
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// RPCBindAddr is where a local rpcbind (portmapper) answers: port 111,
// sunrpc.PortmapPort (testenv cannot import pkg/sunrpc, whose tests use it).
const RPCBindAddr = "127.0.0.1:111"

// NeedRPCBind returns RPCBindAddr once a local rpcbind answers there. When
// none does and the process is root with Debian's rpcbind installed
// (hack/install-deps), it starts one (`rpcbind -w`, left running as the
// system service it is); otherwise it skips t, or fails it under CI=true.
func NeedRPCBind(t testing.TB) string {
	t.Helper()
	if Dialable("tcp", RPCBindAddr)() {
		return RPCBindAddr
	}
	why := ""
	bin, err := exec.LookPath("rpcbind")
	switch {
	case err != nil:
		why = "needs rpcbind (apt-get install rpcbind)"
	case os.Geteuid() != 0:
		why = "needs a running rpcbind, or root to start one"
	default:
		if out, err := exec.Command(bin, "-w").CombinedOutput(); err != nil {
			why = "rpcbind -w: " + err.Error() + ": " + string(out)
			break
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if c, err := net.DialTimeout("tcp", RPCBindAddr, time.Second); err == nil {
				c.Close()
				return RPCBindAddr
			}
		}
		why = "rpcbind started but does not answer at " + RPCBindAddr
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
	return ""
}
