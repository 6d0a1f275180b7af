package fusefs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// The permission tests run file operations as other users in a child
// process: the test binary, started with FUSEFS_TEST_OP set, runs that one
// operation (asOp) and exits before any test runs.
func init() {
	if op := os.Getenv("FUSEFS_TEST_OP"); op != "" {
		fmt.Println(asOp(op, strings.Split(os.Getenv("FUSEFS_TEST_ARGS"), "\x1f")))
		os.Exit(0)
	}
}

// errName is "EACCES" and the like for an errno, or the error's text.
func errName(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// asOp runs one operation and returns its outcome: "ok", "ok:DATA" or
// "STEP:ERRNO".
func asOp(op string, args []string) string {
	switch op {
	case "cat": // PATH: open O_RDONLY, read all
		b, err := os.ReadFile(args[0])
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				return pe.Op + ":" + errName(err)
			}
			return "read:" + errName(err)
		}
		return "ok:" + string(b)
	case "open": // PATH FLAGS: open(2) with FLAGS, then close
		flags, _ := strconv.Atoi(args[1])
		fd, err := syscall.Open(args[0], flags, 0)
		if err != nil {
			return "open:" + errName(err)
		}
		syscall.Close(fd)
		return "ok"
	case "write": // PATH DATA: open O_WRONLY, write DATA at 0, close
		fd, err := syscall.Open(args[0], syscall.O_WRONLY, 0)
		if err != nil {
			return "open:" + errName(err)
		}
		if _, err := syscall.Pwrite(fd, []byte(args[1]), 0); err != nil {
			syscall.Close(fd)
			return "write:" + errName(err)
		}
		if err := syscall.Close(fd); err != nil {
			return "close:" + errName(err)
		}
		return "ok"
	case "write-as": // PATH DATA UID: open O_WRONLY, become UID, write DATA at 0, close
		fd, err := syscall.Open(args[0], syscall.O_WRONLY, 0)
		if err != nil {
			return "open:" + errName(err)
		}
		uid, _ := strconv.Atoi(args[2])
		if err := syscall.Setresuid(uid, uid, uid); err != nil {
			return "setresuid:" + errName(err)
		}
		if _, err := syscall.Pwrite(fd, []byte(args[1]), 0); err != nil {
			syscall.Close(fd)
			return "write:" + errName(err)
		}
		if err := syscall.Close(fd); err != nil {
			return "close:" + errName(err)
		}
		return "ok"
	case "ls": // PATH: opendir and read a directory
		if _, err := os.ReadDir(args[0]); err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				return pe.Op + ":" + errName(err)
			}
			return "readdir:" + errName(err)
		}
		return "ok"
	case "exec": // PATH: execve it (no access(2) first, as a shell would)
		p, err := os.StartProcess(args[0], []string{args[0]}, &os.ProcAttr{})
		if err != nil {
			return "exec:" + errName(err)
		}
		if st, err := p.Wait(); err != nil || !st.Success() {
			return fmt.Sprintf("wait:%v %v", st, err)
		}
		return "ok"
	case "stat": // PATH
		var st syscall.Stat_t
		if err := syscall.Stat(args[0], &st); err != nil {
			return "stat:" + errName(err)
		}
		return "ok"
	case "access": // PATH MODE
		mode, _ := strconv.Atoi(args[1])
		if err := syscall.Access(args[0], uint32(mode)); err != nil {
			return "access:" + errName(err)
		}
		return "ok"
	case "truncate": // PATH
		if err := syscall.Truncate(args[0], 0); err != nil {
			return "truncate:" + errName(err)
		}
		return "ok"
	case "chown": // PATH UID GID
		uid, _ := strconv.Atoi(args[1])
		gid, _ := strconv.Atoi(args[2])
		if err := syscall.Chown(args[0], uid, gid); err != nil {
			return "chown:" + errName(err)
		}
		return "ok"
	}
	return "unknown op " + op
}

// user is a credential the helper process runs as.
type user struct{ uid, gid uint32 }

var (
	nobody  = user{65534, 65534}
	user1   = user{1000, 1000}
	user2   = user{1001, 1001}
	helperM sync.Mutex
	helper  = map[string]string{} // test binary copies other users may run, by test
)

// helperBin returns a copy of the test binary that every user may run (the
// go tool's build directory is root's only), made once per test.
func helperBin(t *testing.T) string {
	t.Helper()
	helperM.Lock()
	defer helperM.Unlock()
	if p, ok := helper[t.Name()]; ok {
		return p
	}
	self, err := os.Executable()
	must(t, err)
	dir := t.TempDir()
	openUp(t, dir)
	p := filepath.Join(dir, "helper")
	b, err := os.ReadFile(self)
	must(t, err)
	must(t, os.WriteFile(p, b, 0o755))
	helper[t.Name()] = p
	t.Cleanup(func() {
		helperM.Lock()
		delete(helper, t.Name())
		helperM.Unlock()
	})
	return p
}

// openUp makes dir and the temporary directories above it searchable by
// all (t.TempDir makes them 0700).
func openUp(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		must(t, os.Chmod(d, 0o755))
	}
}

// as runs op as u in a helper process and returns its outcome (asOp).
func as(t *testing.T, u user, op string, args ...string) string {
	t.Helper()
	cmd := helperCmd(t, u, op, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper %s %v as %d: %v: %s", op, args, u.uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

func helperCmd(t *testing.T, u user, op string, args ...string) *exec.Cmd {
	cmd := exec.Command(helperBin(t))
	cmd.Env = append(os.Environ(), "FUSEFS_TEST_OP="+op, "FUSEFS_TEST_ARGS="+strings.Join(args, "\x1f"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{u.gid}}}
	return cmd
}

// permMount mounts s over TCP with the extra options, on a mount point
// every user reaches, with the export's root searchable by all.
func permMount(t *testing.T, s *testServer, extra string) string {
	t.Helper()
	return permMountProto(t, s, mountopts.ProtoTCP, extra)
}

// permMountProto is permMount over proto (mountopts.ProtoTCP, mountopts.ProtoRDMA).
func permMountProto(t *testing.T, s *testServer, proto, extra string) string {
	t.Helper()
	must(t, os.Chmod(s.root, 0o755))
	mnt, _ := s.mount(t, proto, extra)
	openUp(t, filepath.Dir(mnt))
	return mnt
}

func wantOutcome(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %q, want %q", what, got, want)
	}
}

// writeFile makes a file on the export directly, with owner and mode.
func writeFile(t *testing.T, path, data string, uid, gid int, mode uint32) {
	t.Helper()
	must(t, os.WriteFile(path, []byte(data), 0o600))
	must(t, os.Chown(path, uid, gid))
	must(t, syscall.Chmod(path, mode))
}

func readBack(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return string(b)
}

// TestOpenPermission (over TCP and RDMA): open(2) through the mount needs the permission its
// access mode asks for, as the server grants it (NFS ACCESS): a user
// without read permission cannot open a file for reading, even when root
// read it through the same mount just before (its data is in the page
// cache); a user without write permission cannot open it for writing, so
// writes nothing into the page cache; O_TRUNC needs write permission,
// also for the owner (mode 0477), and so does truncate(2); opendir needs
// read permission on the directory; execve needs execute permission as
// the server grants it (the kernel only checks that someone may execute).
func TestOpenPermission(t *testing.T) {
	needFUSE(t)
	for _, proto := range []string{mountopts.ProtoTCP, mountopts.ProtoRDMA} {
		t.Run(proto, func(t *testing.T) { testOpenPermission(t, proto) })
	}
}

func testOpenPermission(t *testing.T, proto string) {
	s := startServer(t)
	mnt := permMountProto(t, s, proto, "")
	writeFile(t, filepath.Join(s.root, "secret"), "root only", 0, 0, 0o600)
	writeFile(t, filepath.Join(s.root, "public"), "for all", 0, 0, 0o644)
	writeFile(t, filepath.Join(s.root, "r-only"), "owner may read", 1000, 1000, 0o477)
	secret, public, rOnly := filepath.Join(mnt, "secret"), filepath.Join(mnt, "public"), filepath.Join(mnt, "r-only")

	// root reads both through the mount: their pages are cached
	if got := readBack(t, secret); got != "root only" {
		t.Fatalf("root reading secret: %q", got)
	}
	if got := readBack(t, public); got != "for all" {
		t.Fatalf("root reading public: %q", got)
	}
	wantOutcome(t, "nobody reads a root 0600 file", as(t, nobody, "cat", secret), "open:EACCES")
	wantOutcome(t, "nobody opens a root 0600 file O_RDWR", as(t, nobody, "open", secret, strconv.Itoa(syscall.O_RDWR)), "open:EACCES")
	wantOutcome(t, "nobody reads a root 0644 file", as(t, nobody, "cat", public), "ok:for all")
	wantOutcome(t, "user writes a root 0644 file", as(t, user1, "write", public, "XXX"), "open:EACCES")
	wantOutcome(t, "user opens a root 0644 file O_RDWR", as(t, user1, "open", public, strconv.Itoa(syscall.O_RDWR)), "open:EACCES")
	if got := readBack(t, public); got != "for all" {
		t.Errorf("root reads %q through the mount after a refused write, want %q", got, "for all")
	}
	if got := readBack(t, filepath.Join(s.root, "public")); got != "for all" {
		t.Errorf("server file %q after a refused write", got)
	}

	// a directory others may search but not read: its files open, its
	// listing does not
	must(t, os.Mkdir(filepath.Join(s.root, "unlistable"), 0o711))
	must(t, syscall.Chmod(filepath.Join(s.root, "unlistable"), 0o711))
	writeFile(t, filepath.Join(s.root, "unlistable", "f"), "found", 0, 0, 0o644)
	readBack(t, filepath.Join(mnt, "unlistable", "f"))
	if _, err := os.ReadDir(filepath.Join(mnt, "unlistable")); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, "user reads a file in a 0711 directory", as(t, user1, "cat", filepath.Join(mnt, "unlistable", "f")), "ok:found")
	wantOutcome(t, "user lists a 0711 directory", as(t, user1, "ls", filepath.Join(mnt, "unlistable")), "open:EACCES")

	// a program only its owner may run
	prog, err := os.ReadFile("/bin/true")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(s.root, "prog"), prog, 0o700))
	must(t, syscall.Chmod(filepath.Join(s.root, "prog"), 0o700))
	wantOutcome(t, "root runs its 0700 program", as(t, user{0, 0}, "exec", filepath.Join(mnt, "prog")), "ok")
	wantOutcome(t, "user runs a root 0700 program", as(t, user1, "exec", filepath.Join(mnt, "prog")), "exec:EACCES")
	must(t, syscall.Chmod(filepath.Join(s.root, "prog"), 0o711))
	// the open of an exec GETATTRs: the new mode is seen at once
	wantOutcome(t, "user runs a root 0711 program", as(t, user1, "exec", filepath.Join(mnt, "prog")), "ok")

	wantOutcome(t, "owner opens its 0477 file O_RDONLY|O_TRUNC", as(t, user1, "open", rOnly, strconv.Itoa(syscall.O_RDONLY|syscall.O_TRUNC)), "open:EACCES")
	wantOutcome(t, "owner truncates its 0477 file", as(t, user1, "truncate", rOnly), "truncate:EACCES")
	if got := readBack(t, filepath.Join(s.root, "r-only")); got != "owner may read" {
		t.Errorf("0477 file on the server after refused truncations: %q", got)
	}
	wantOutcome(t, "owner opens its 0477 file O_RDONLY", as(t, user1, "open", rOnly, strconv.Itoa(syscall.O_RDONLY)), "ok")
	// control: with write permission, O_TRUNC truncates
	must(t, syscall.Chmod(filepath.Join(s.root, "r-only"), 0o677))
	wantOutcome(t, "owner opens its 0677 file O_RDONLY|O_TRUNC", as(t, user1, "open", rOnly, strconv.Itoa(syscall.O_RDONLY|syscall.O_TRUNC)), "ok")
	if got := readBack(t, filepath.Join(s.root, "r-only")); got != "" {
		t.Errorf("0677 file after O_TRUNC: %q, want empty", got)
	}
}

// TestFailedWriteLeavesNoData (over TCP and RDMA): the data of a write that the server
// refused is not read back through the mount. A root process opens a root
// 0644 file for writing, then becomes uid 1000 and writes: write(2)
// succeeds (write-behind) and puts the data in the kernel's page cache,
// the WRITE, made as uid 1000, is refused, close(2) reports EACCES; root
// then reads the server's data, not the refused bytes, though nothing of
// the file changed on the server (its pages would be kept at open).
func TestFailedWriteLeavesNoData(t *testing.T) {
	needFUSE(t)
	for _, proto := range []string{mountopts.ProtoTCP, mountopts.ProtoRDMA} {
		t.Run(proto, func(t *testing.T) { testFailedWriteLeavesNoData(t, proto) })
	}
}

func testFailedWriteLeavesNoData(t *testing.T, proto string) {
	s := startServer(t)
	mnt := permMountProto(t, s, proto, "")
	onServer := filepath.Join(s.root, "shared")
	writeFile(t, onServer, "original-content", 0, 0, 0o644)
	f := filepath.Join(mnt, "shared")
	if got := readBack(t, f); got != "original-content" {
		t.Fatalf("root reading: %q", got)
	}
	wantOutcome(t, "write as uid 1000 through root's descriptor", as(t, user{0, 0}, "write-as", f, "REFUSED", "1000"), "close:EACCES")
	if got := readBack(t, onServer); got != "original-content" {
		t.Fatalf("server file after the refused write: %q", got)
	}
	for i := range 2 {
		if got := readBack(t, f); got != "original-content" {
			t.Fatalf("root reads %q through the mount after the refused write (read %d), want the server's %q", got, i+1, "original-content")
		}
	}
}

// TestSearchPermission: every directory of a path needs search (execute)
// permission, also when root walked the same path through the mount just
// before (the kernel then has the names cached): a user without it on one
// directory of a deep path can neither open nor stat what is below; a
// user with it on all can. Taking it away through the mount is seen at
// once, on the server once the directory's attributes are refreshed.
func TestSearchPermission(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	mnt := permMount(t, s, "actimeo=1")
	deep := filepath.Join(s.root, "a", "b", "c", "d")
	must(t, os.MkdirAll(deep, 0o755))
	writeFile(t, filepath.Join(deep, "file"), "deep", 0, 0, 0o644)
	// c: search for its group only
	must(t, os.Chown(filepath.Join(s.root, "a", "b", "c"), 0, 1000))
	must(t, syscall.Chmod(filepath.Join(s.root, "a", "b", "c"), 0o750))
	must(t, syscall.Chmod(filepath.Join(s.root, "a", "b"), 0o777))
	file := filepath.Join(mnt, "a", "b", "c", "d", "file")
	for _, walked := range []bool{false, true} {
		if walked {
			// root walks the path: the kernel caches its names
			if got := readBack(t, file); got != "deep" {
				t.Fatalf("root: %q", got)
			}
		}
		wantOutcome(t, fmt.Sprintf("nobody, not in c's group, reads (root walked first: %v)", walked), as(t, nobody, "cat", file), "open:EACCES")
		wantOutcome(t, fmt.Sprintf("nobody stats (root walked first: %v)", walked), as(t, nobody, "stat", file), "stat:EACCES")
		wantOutcome(t, fmt.Sprintf("user in c's group reads (root walked first: %v)", walked), as(t, user1, "cat", file), "ok:deep")
		wantOutcome(t, fmt.Sprintf("nobody stats c itself (root walked first: %v)", walked), as(t, nobody, "stat", filepath.Dir(filepath.Dir(file))), "ok")
	}
	// a chmod through a mount is seen at once, though the kernel had the
	// names in the directory cached (default timeouts: for 30 s)
	mnt2 := permMount(t, s, "")
	file2, d2 := filepath.Join(mnt2, "a", "b", "c", "d", "file"), filepath.Join(mnt2, "a", "b", "c", "d")
	if got := readBack(t, file2); got != "deep" {
		t.Fatalf("root: %q", got)
	}
	wantOutcome(t, "user in c's group reads, second mount", as(t, user1, "cat", file2), "ok:deep")
	must(t, os.Chmod(d2, 0o700))
	wantOutcome(t, "user reads after chmod 0700 of d through the mount", as(t, user1, "cat", file2), "open:EACCES")
	must(t, os.Chmod(d2, 0o755))
	wantOutcome(t, "user reads after chmod 0755 of d through the mount", as(t, user1, "cat", file2), "ok:deep")

	// b: read and write for others, no search; c searchable by all
	must(t, syscall.Chmod(filepath.Join(s.root, "a", "b"), 0o776))
	must(t, syscall.Chmod(filepath.Join(s.root, "a", "b", "c"), 0o755))
	time.Sleep(1100 * time.Millisecond) // actimeo=1: the mount sees the new modes
	if got := readBack(t, file); got != "deep" {
		t.Fatalf("root: %q", got)
	}
	wantOutcome(t, "user without search permission on b reads", as(t, user1, "cat", file), "open:EACCES")
	wantOutcome(t, "user without search permission on b stats c", as(t, user1, "stat", filepath.Join(mnt, "a", "b", "c")), "stat:EACCES")
	wantOutcome(t, "user stats b itself", as(t, user1, "stat", filepath.Join(mnt, "a", "b")), "ok")
}

// TestAccessCache: the server decides at open, beyond the mode bits the
// kernel checks (default_permissions): with root squashed to nobody, root
// cannot open another user's 0600 file, though the kernel lets root
// open anything. The answer is kept per credential and inode while the
// inode's attributes are fresh and unchanged: opening again costs no NFS
// ACCESS; a chmod made on the server is seen at the next open (its
// GETATTR, close-to-open), and the owner has its own answer.
func TestAccessCache(t *testing.T) {
	needFUSE(t)
	s := startServerExport(t, siw.Config{RTRDelay: -1}, nfsserver.Export{Path: "/", RootSquash: true})
	must(t, os.Chmod(s.root, 0o755))
	pc, wrap := countCalls()
	mnt, _ := s.mountWith(t, mountopts.ProtoTCP, "acregmin=30,acregmax=30", wrap)
	openUp(t, filepath.Dir(mnt))
	onServer := filepath.Join(s.root, "f")
	writeFile(t, onServer, "user's", 1000, 1000, 0o600)
	f := filepath.Join(mnt, "f")
	ro := strconv.Itoa(syscall.O_RDONLY)
	wantOutcome(t, "squashed root opens a user's 0600 file", as(t, user{0, 0}, "open", f, ro), "open:EACCES")
	before := pc.get(nfs3.ProcAccess)
	for range 3 {
		wantOutcome(t, "squashed root opens it again", as(t, user{0, 0}, "open", f, ro), "open:EACCES")
	}
	if got := pc.get(nfs3.ProcAccess) - before; got != 0 {
		t.Errorf("%d NFS ACCESS calls for opens asked again within the attribute timeout, want 0", got)
	}
	wantOutcome(t, "the owner opens it", as(t, user1, "cat", f), "ok:user's")
	must(t, syscall.Chmod(onServer, 0o604))
	wantOutcome(t, "squashed root opens it after chmod 0604 on the server", as(t, user{0, 0}, "cat", f), "ok:user's")
	must(t, syscall.Chmod(onServer, 0o600))
	wantOutcome(t, "squashed root opens it after chmod 0600 on the server", as(t, user{0, 0}, "open", f, ro), "open:EACCES")
}

// TestChmodElsewhere: the kernel checks mode bits (default_permissions)
// with the inode's cached attributes: a chmod through another mount that
// grants a permission is seen at once (the kernel refreshes the
// attributes before it denies); one that takes a permission away is seen
// by access(2) once the attribute timeout has passed, and at once by
// open(2), whose GETATTR (close-to-open) and NFS ACCESS decide.
func TestChmodElsewhere(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	mnt := permMount(t, s, "acregmin=2,acregmax=2")
	other := permMount(t, s, "")
	writeFile(t, filepath.Join(s.root, "f"), "x", 0, 0, 0o644)
	f, fOther := filepath.Join(mnt, "f"), filepath.Join(other, "f")
	w := strconv.Itoa(unix.W_OK)
	wantOutcome(t, "W_OK on 0644", as(t, user1, "access", f, w), "access:EACCES")
	must(t, os.Chmod(fOther, 0o666))
	wantOutcome(t, "W_OK after chmod 0666 elsewhere", as(t, user1, "access", f, w), "ok")
	must(t, os.Chmod(fOther, 0o644))
	changed := time.Now()
	for {
		got := as(t, user1, "access", f, w)
		if got == "access:EACCES" {
			break
		}
		if time.Since(changed) > 10*time.Second {
			t.Fatalf("W_OK still %q 10 s after chmod 0644 elsewhere (attribute timeout 2 s)", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("chmod 0644 elsewhere seen by access(2) after %v", time.Since(changed))
	// open: at once, though the kernel's cached mode grants it
	must(t, os.Chmod(fOther, 0o666))
	wantOutcome(t, "W_OK after chmod 0666 elsewhere", as(t, user1, "access", f, w), "ok")
	must(t, os.Chmod(fOther, 0o644))
	wantOutcome(t, "open O_WRONLY after chmod 0644 elsewhere", as(t, user1, "open", f, strconv.Itoa(syscall.O_WRONLY)), "open:EACCES")
	wantOutcome(t, "W_OK after that open", as(t, user1, "access", f, w), "access:EACCES")
}

// TestNameTooLong: a name longer than the server's name_max is
// ENAMETOOLONG, also in a directory whose names the mount knows
// (dirnames.go), where an unknown name is otherwise ENOENT without asking
// the server.
func TestNameTooLong(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	mnt := permMount(t, s, "")
	must(t, os.Mkdir(filepath.Join(mnt, "made"), 0o755))
	long, max := strings.Repeat("n", 256), strings.Repeat("n", 255)
	for _, dir := range []string{mnt, filepath.Join(mnt, "made")} {
		if _, err := os.Stat(filepath.Join(dir, long)); !errors.Is(err, syscall.ENAMETOOLONG) {
			t.Errorf("stat of a 256-byte name in %s: %v, want ENAMETOOLONG", dir, err)
		}
		if _, err := os.Stat(filepath.Join(dir, max)); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("stat of a missing 255-byte name in %s: %v, want ENOENT", dir, err)
		}
	}
}

// TestChownThroughMount: through the mount, a user who does not own a
// file may not chown it, not even to its current owner and group (EPERM,
// from the server); its owner may chown it to itself.
func TestChownThroughMount(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	mnt := permMount(t, s, "")
	writeFile(t, filepath.Join(s.root, "owned"), "x", 1000, 1000, 0o644)
	f := filepath.Join(mnt, "owned")
	wantOutcome(t, "non-owner chown to the current ids", as(t, user2, "chown", f, "1000", "1000"), "chown:EPERM")
	wantOutcome(t, "owner chown to the current ids", as(t, user1, "chown", f, "1000", "1000"), "ok")
	wantOutcome(t, "owner chown away", as(t, user1, "chown", f, "1001", "1000"), "chown:EPERM")
}

// TestUnsearchableDirLookups: the names in a directory not searchable by
// all come to Lookup at every walk (entry timeout 0), which answers them
// without an NFS call while the name and the caller's search permission
// are fresh: walking into a 0700 directory costs no more NFS LOOKUPs than
// into a 0755 one.
func TestUnsearchableDirLookups(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	must(t, os.Chmod(s.root, 0o755))
	pc, wrap := countCalls()
	mnt, _ := s.mountWith(t, mountopts.ProtoTCP, "", wrap)
	for _, mode := range []uint32{0o755, 0o700} {
		d := fmt.Sprintf("d%o", mode)
		must(t, os.MkdirAll(filepath.Join(s.root, d, "sub"), 0o755))
		must(t, syscall.Chmod(filepath.Join(s.root, d), mode))
		writeFile(t, filepath.Join(s.root, d, "sub", "f"), "x", 0, 0, 0o644)
		p := filepath.Join(mnt, d, "sub", "f")
		readBack(t, p)
		lookups, accesses := pc.get(nfs3.ProcLookup), pc.get(nfs3.ProcAccess)
		for range 20 {
			if _, err := os.Stat(p); err != nil {
				t.Fatal(err)
			}
		}
		if got := pc.get(nfs3.ProcLookup) - lookups; got != 0 {
			t.Errorf("mode %o: %d NFS LOOKUPs for 20 stats of a path walked before, want 0", mode, got)
		}
		if got := pc.get(nfs3.ProcAccess) - accesses; got != 0 {
			t.Errorf("mode %o: %d NFS ACCESS calls for 20 stats of a path walked before, want 0", mode, got)
		}
	}
}

// TestAccessCacheEntries: an inode keeps the ACCESS answers of at most
// MaxAccessCreds credentials, dropping the least recently used; an answer
// is fresh while the inode's attributes are, for the mode, owner and group
// it was given for, and at most acregmax; forgetting the inode frees them
// all.
func TestAccessCacheEntries(t *testing.T) {
	sys := &fsys{o: mountopts.Options{ACRegMin: 10 * time.Second, ACRegMax: time.Minute}}
	n := &node{sys: sys}
	a := attrForTest(1)
	a.Mode = 0o644
	n.refresh(&a)
	post := nfs3.PostOpAttr{Set: true, Attr: a}
	now := time.Now()
	key := func(i int) string { return credKey(uint32(i), 0, nil) }
	n.mu.Lock()
	for i := range MaxAccessCreds + 5 {
		n.answeredLocked(key(i), uint32(i), &post)
		if i == MaxAccessCreds-1 {
			// credential 4 asks again: most recently used
			if bits, ok := n.accessLocked(key(4), now); !ok || bits != 4 {
				t.Fatalf("credential 4: %d, %v", bits, ok)
			}
		}
	}
	if len(n.acc) != MaxAccessCreds || sys.accessEntries.Load() != MaxAccessCreds {
		t.Fatalf("%d entries (counted %d), want %d", len(n.acc), sys.accessEntries.Load(), MaxAccessCreds)
	}
	for i, want := range map[int]bool{0: false, 3: false, 4: true, 5: false, 6: true, MaxAccessCreds + 4: true} {
		if _, ok := n.accessLocked(key(i), now); ok != want {
			t.Errorf("credential %d cached: %v, want %v", i, ok, want)
		}
	}
	n.ac.timeo = 10 * time.Second // as after a change
	if _, ok := n.accessLocked(key(8), now.Add(20*time.Second)); ok {
		t.Error("an answer is fresh after the attributes' timeout (acregmin 10 s)")
	}
	at := n.ac.at
	n.ac.at = now.Add(2*time.Minute - time.Second) // attributes refreshed, unchanged
	if _, ok := n.accessLocked(key(8), now.Add(2*time.Minute)); ok {
		t.Error("an answer older than acregmax is fresh")
	}
	n.ac.at = at
	a.Mode = 0o600
	n.refreshLocked(&a)
	if _, ok := n.accessLocked(key(8), now); ok {
		t.Error("an answer for another mode is fresh")
	}
	n.mu.Unlock()
	n.OnForget()
	if len(n.acc) != 0 || sys.accessEntries.Load() != 0 {
		t.Errorf("after FORGET: %d entries, counted %d", len(n.acc), sys.accessEntries.Load())
	}
}

// TestSpecialFilePermission: opening a FIFO through the mount needs the
// permission its access mode asks for (the kernel opens a FIFO without
// asking the file system, and checks its mode bits: default_permissions).
func TestSpecialFilePermission(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	mnt := permMount(t, s, "")
	must(t, syscall.Mkfifo(filepath.Join(s.root, "fifo"), 0o600))
	must(t, os.Chown(filepath.Join(s.root, "fifo"), 1000, 1000))
	fifo := filepath.Join(mnt, "fifo")
	nb := syscall.O_NONBLOCK
	wantOutcome(t, "other user opens a 0600 FIFO for reading", as(t, user2, "open", fifo, strconv.Itoa(syscall.O_RDONLY|nb)), "open:EACCES")
	wantOutcome(t, "other user opens a 0600 FIFO for writing", as(t, user2, "open", fifo, strconv.Itoa(syscall.O_RDWR|nb)), "open:EACCES")
	wantOutcome(t, "owner opens its 0600 FIFO for reading", as(t, user1, "open", fifo, strconv.Itoa(syscall.O_RDONLY|nb)), "ok")
}

// TestWriteKillsSetID: a user who may write a set-user-ID and
// set-group-ID file but does not own it writes through the mount: the
// write succeeds and the server clears both bits (FUSE_HANDLE_KILLPRIV_V2:
// no SETATTR of the mode as the writer, which the server would refuse); so
// does a truncate by that user; the mount shows the new mode.
func TestWriteKillsSetID(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	mnt := permMount(t, s, "")
	for _, op := range []string{"write", "truncate"} {
		onServer := filepath.Join(s.root, op)
		writeFile(t, onServer, "original", 1000, 1000, 0o6777)
		p := filepath.Join(mnt, op)
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
		args := []string{p}
		if op == "write" {
			args = append(args, "XX")
		}
		wantOutcome(t, "other user's "+op+" of a 06777 file", as(t, user2, op, args...), "ok")
		for what, path := range map[string]string{"on the server": onServer, "through the mount": p} {
			fi, err := os.Stat(path)
			must(t, err)
			if m := fi.Mode(); m&(os.ModeSetuid|os.ModeSetgid) != 0 || m.Perm() != 0o777 {
				t.Errorf("after %s by another user: mode %v %s, want -rwxrwxrwx", op, m, what)
			}
		}
	}
}
