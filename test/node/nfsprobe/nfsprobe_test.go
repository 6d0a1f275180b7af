package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// The client the volume and the root export are exported to, and a client
// they are not: both addresses of this machine's loopback.
const (
	granted = "127.0.0.1"
	other   = "127.0.0.2"
)

// server is a running `driver server`.
type server struct {
	root                     string
	mnt, nfs, nlm, adminAddr string
	log                      *testenv.Buffer
}

// startServer runs the export server on 127.0.0.1: the root exported to
// 127.0.0.1/32 only (read-only), the admin API with a token, no grace
// period, klog's default verbosity (0).
func startServer(t *testing.T) (*server, *admin.Client) {
	t.Helper()
	bin := testenv.Driver(t, false)
	dir := t.TempDir()
	s := &server{root: filepath.Join(dir, "root"), log: &testenv.Buffer{}}
	for _, d := range []string{s.root, filepath.Join(dir, "state")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testenv.MustWrite(t, filepath.Join(dir, "token"), []byte("s3cret-token\n"))
	testenv.MustWrite(t, filepath.Join(dir, "handle-key"), []byte("0123456789abcdef0123456789abcdef"))
	port := func() string { return strconv.Itoa(testenv.FreePort(t)) }
	mntP, nfsP, nlmP, nsmP, admP := port(), port(), port(), port(), port()
	s.mnt, s.nfs, s.nlm, s.adminAddr = granted+":"+mntP, granted+":"+nfsP, granted+":"+nlmP, granted+":"+admP
	cmd := exec.Command(bin, "server", "--root", s.root, "--export", "/:"+granted+"/32:ro",
		"--handle-key-file", filepath.Join(dir, "handle-key"), "--listen", granted,
		"--mount-port", mntP, "--nfs-port", nfsP, "--rdma-port=0", "--nlm-port", nlmP, "--nsm-port", nsmP,
		"--rpcbind=false", "--grace-period=0", "--state-dir", filepath.Join(dir, "state"),
		"--admin-listen", s.adminAddr, "--admin-token-file", filepath.Join(dir, "token"))
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			t.Logf("---- server log ----\n%s", s.log.String())
		}
	})
	ready := testenv.Dialable("tcp", s.adminAddr)
	testenv.Eventually(t, 30*time.Second, "the export server", func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the export server exited: %v\n%s", err, s.log.String())
		default:
		}
		return ready()
	})
	return s, admin.NewClient("http://"+s.adminAddr, "s3cret-token", nil)
}

var (
	probeBin  string
	probeOnce = make(chan struct{}, 1)
)

// probe builds nfsprobe (static, as the node test builds it) once.
func probe(t *testing.T) string {
	t.Helper()
	select {
	case probeOnce <- struct{}{}:
		dir, err := os.MkdirTemp("", "nfsprobe-")
		if err != nil {
			t.Fatal(err)
		}
		probeBin = filepath.Join(dir, "nfsprobe")
		cmd := exec.Command("go", "build", "-o", probeBin, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build nfsprobe: %v\n%s", err, out)
		}
	default:
	}
	if probeBin == "" {
		t.Fatal("nfsprobe was not built")
	}
	return probeBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if probeBin != "" {
		os.RemoveAll(filepath.Dir(probeBin))
	}
	testenv.RemoveDrivers()
	os.Exit(code)
}

// runProbe runs nfsprobe from source with args; the exit code and its result.
func runProbe(t *testing.T, source string, args ...string) (Result, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, probe(t), append([]string{"--source", source, "--timeout", "5s"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("nfsprobe %v: %v", args, err)
	}
	var r Result
	if jerr := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &r); jerr != nil {
		t.Fatalf("nfsprobe %v: output %q (stderr %q): %v", args, out.String(), errb.String(), jerr)
	}
	t.Logf("from %s: nfsprobe %s -> %s", source, strings.Join(args, " "), out.String())
	return r, code
}

// expect runs nfsprobe and checks that it got an answer with status.
func expect(t *testing.T, source, status string, args ...string) Result {
	t.Helper()
	r, code := runProbe(t, source, args...)
	if code != 0 {
		t.Fatalf("nfsprobe %v from %s: exit %d (no answer): %+v", args, source, code, r)
	}
	if r.Status != status {
		t.Errorf("nfsprobe %v from %s: status %q, want %q (%+v)", args, source, r.Status, status, r)
	}
	if !strings.HasPrefix(r.Source, source+":") {
		t.Errorf("nfsprobe %v: called from %q, want %s", args, r.Source, source)
	}
	return r
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestRefusals: a client the export server granted a volume (127.0.0.1)
// mounts it, reads, writes and locks its files; another address of the
// same machine (127.0.0.2) is refused MOUNT of the volume and of the root
// export (MNT3ERR_ACCES), every NFS call with the granted client's handles
// (NFS3ERR_ACCES: nothing read, nothing written), NLM LOCK
// (NLM4_FAILED), and the admin API without the token (HTTP 401); the
// server logs each refusal once per client and program within the rate
// limit.
func TestRefusals(t *testing.T) {
	testenv.NeedRoot(t, "the export server opens files by handle (CAP_DAC_READ_SEARCH)")
	s, adm := startServer(t)
	ctx := testenv.Context(t, time.Minute)
	if _, err := adm.CreateVolume(ctx, "vol", 0, 0o777, nil); err != nil {
		t.Fatal(err)
	}
	if err := adm.Grant(ctx, "vol", admin.Access{Node: "node-a", Addrs: []string{granted}}); err != nil {
		t.Fatal(err)
	}
	secret := []byte("the owner's secret\n")
	secretPath := filepath.Join(s.root, "vol", "secret")
	if err := os.WriteFile(secretPath, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	st0, err := os.Stat(secretPath)
	if err != nil {
		t.Fatal(err)
	}

	// the granted client
	vol := expect(t, granted, "MNT3_OK", "mount", s.mnt, "/vol").FH
	expect(t, granted, "MNT3_OK", "mount", s.mnt, "/")
	file := expect(t, granted, "NFS3_OK", "lookup", s.nfs, vol, "secret").FH
	if vol == "" || file == "" {
		t.Fatalf("no handles: volume %q, file %q", vol, file)
	}
	expect(t, granted, "NFS3_OK", "getattr", s.nfs, vol)
	if r := expect(t, granted, "NFS3_OK", "readdir", s.nfs, vol); !strings.Contains(strings.Join(r.Entries, " "), "secret") {
		t.Errorf("READDIR of the volume by the granted client: %v, no secret", r.Entries)
	}
	if r := expect(t, granted, "NFS3_OK", "read", s.nfs, vol, "secret"); r.Bytes != len(secret) || r.SHA256 != sum(secret) {
		t.Errorf("READ by the granted client: %d bytes, sha256 %s; want %d, %s", r.Bytes, r.SHA256, len(secret), sum(secret))
	}
	if r := expect(t, granted, "NFS3_OK", "write", s.nfs, vol, "mine"); r.Bytes == 0 {
		t.Errorf("WRITE by the granted client wrote nothing: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(s.root, "vol", "mine")); err != nil || string(b) != "nfsprobe was here\n" {
		t.Errorf("the granted client's file: %q, %v", b, err)
	}
	if r := expect(t, granted, "NLM4_GRANTED", "--nfs-port", port(s.nfs), "lock", s.nlm, vol, "secret"); r.Detail != "granted; UNLOCK: NLM4_GRANTED" {
		t.Errorf("LOCK by the granted client: %q, want granted and unlocked", r.Detail)
	}
	if strings.Contains(s.log.String(), `client="`+granted+`"`) {
		t.Errorf("the server logged a refusal of the granted client:\n%s", s.log.String())
	}

	// another address: every call refused, nothing read or changed
	expect(t, other, "MNT3ERR_ACCES", "mount", s.mnt, "/")
	expect(t, other, "MNT3ERR_ACCES", "mount", s.mnt, "/vol")
	expect(t, other, "NFS3ERR_ACCES", "getattr", s.nfs, vol)
	if r := expect(t, other, "NFS3ERR_ACCES", "readdir", s.nfs, vol); len(r.Entries) > 0 {
		t.Errorf("refused READDIR listed %v", r.Entries)
	}
	expect(t, other, "NFS3ERR_ACCES", "lookup", s.nfs, vol, "secret")
	for _, args := range [][]string{{"read", s.nfs, file}, {"read", s.nfs, vol, "secret"}} {
		if r := expect(t, other, "NFS3ERR_ACCES", args...); r.Bytes != 0 || r.SHA256 != "" {
			t.Errorf("refused READ returned %d bytes", r.Bytes)
		}
	}
	for _, args := range [][]string{{"write", s.nfs, file}, {"write", s.nfs, vol, "theirs"}} {
		if r := expect(t, other, "NFS3ERR_ACCES", args...); r.Bytes != 0 {
			t.Errorf("refused WRITE wrote %d bytes", r.Bytes)
		}
	}
	expect(t, other, "NLM4_FAILED", "--nfs-port", port(s.nfs), "lock", s.nlm, file)
	for _, p := range []string{"/v1/volumes", "/v1/status"} {
		if r := expect(t, other, "HTTP 401", "admin", "http://"+s.adminAddr+p); strings.Contains(r.Detail, "vol") {
			t.Errorf("the admin API answered without the token: %s", r.Detail)
		}
	}
	// the granted client without the token is refused as well
	expect(t, granted, "HTTP 401", "admin", "http://"+s.adminAddr+"/v1/volumes")

	// nothing read or changed
	if b, err := os.ReadFile(secretPath); err != nil || !bytes.Equal(b, secret) {
		t.Errorf("the secret file after the refusals: %q, %v", b, err)
	}
	if st, err := os.Stat(secretPath); err != nil || !st.ModTime().Equal(st0.ModTime()) || st.Size() != st0.Size() {
		t.Errorf("the secret file changed: %v, %v (was %v, %d bytes)", st, err, st0.ModTime(), st0.Size())
	}
	if _, err := os.Stat(filepath.Join(s.root, "vol", "theirs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused client's CREATE made a file: %v", err)
	}

	// each refusal logged at verbosity 0: one line per program within the
	// rate limit (the NFS calls above were refused 7 times), the admin
	// API's too (refused twice)
	logs := s.log.String()
	for prog, want := range map[string]int{"MOUNT": 1, "NFS": 1, "NLM": 1} {
		re := regexp.MustCompile(`"nfs server: call refused" client="` + regexp.QuoteMeta(other) + `" program="` + prog + `" procedure="[A-Z]+" export="/(vol)?"`)
		if n := len(re.FindAllString(logs, -1)); n != want {
			t.Errorf("%d log lines of %s refusals of %s, want %d", n, prog, other, want)
		}
	}
	re := regexp.MustCompile(`"admin: request refused: bad or missing token" remote="` + regexp.QuoteMeta(other) + `:`)
	if n := len(re.FindAllString(logs, -1)); n != 1 {
		t.Errorf("%d log lines of the admin API's refusals of %s, want 1", n, other)
	}
}

// port returns the port of HOST:PORT.
func port(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// TestNoAnswer: a call nobody answers is no status (exit 2), not a refusal.
func TestNoAnswer(t *testing.T) {
	p := strconv.Itoa(testenv.FreePort(t))
	for _, args := range [][]string{{"mount", granted + ":" + p, "/"}, {"getattr", granted + ":" + p, "00"}, {"admin", "http://" + granted + ":" + p + "/"}} {
		r, code := runProbe(t, granted, args...)
		if code != 2 || r.Status != "ERROR" {
			t.Errorf("nfsprobe %v to a closed port: exit %d, status %q; want 2, ERROR", args, code, r.Status)
		}
	}
}
