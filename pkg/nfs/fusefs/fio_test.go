package fusefs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

// fioJobSize is the file of each fio job, 64 MiB; fioJobs jobs of each
// kind run at once.
const (
	fioJobSize = 64 << 20
	fioJobs    = 4
)

// fioJobFile is the fio job file of TestFio: 4 sequential writers (1 MiB
// blocks) then 4 random writers (4 KiB to 256 KiB blocks, every block
// written once) then 4 random writers through MAP_SHARED mappings (the
// mmap engine, 16 MiB each), each job verifying everything it wrote with
// CRC32C once its writes are done (verify_fatal: the first bad block ends
// the job with an error). Files live in %s.
const fioJobFile = `[global]
directory=%s
size=%d
numjobs=%d
ioengine=psync
verify=crc32c
verify_fatal=1
do_verify=1
fsync_on_close=1
group_reporting=0

[seq-write]
rw=write
bs=1m

[rand-write]
stonewall
rw=randwrite
bsrange=4k-256k
random_generator=tausworthe64

[mmap-write]
stonewall
ioengine=mmap
rw=randwrite
size=16m
bsrange=4k-64k
`

// fioReport is the part of fio's --output-format=json that the test reads.
type fioReport struct {
	Jobs []struct {
		Name  string `json:"jobname"`
		Error int    `json:"error"`
		Read  struct {
			Bytes int64 `json:"io_bytes"`
		} `json:"read"`
		Write struct {
			Bytes int64 `json:"io_bytes"`
		} `json:"write"`
	} `json:"jobs"`
}

// TestFio runs Debian's fio through the mount, over RPC-over-RDMA and
// TCP against our export server: several jobs at once writing with
// sequential, random and mmap'd I/O, each verifying its data with
// CRC32C. It fails on fio's exit status, on any job's error (a verify
// failure included), and unless every job wrote and read back its whole
// file; the server's disk then holds every file at its full size.
func TestFio(t *testing.T) {
	needFUSE(t)
	fio, err := exec.LookPath("fio")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("fio not installed (apt-get install fio; hack/install-deps)")
		}
		t.Skip("fio not installed (apt-get install fio): skipping the fio verify jobs")
	}
	for _, proto := range []string{mountopts.ProtoRDMA, mountopts.ProtoTCP} {
		t.Run(proto, func(t *testing.T) {
			srv := startServer(t)
			dir, _ := srv.mount(t, proto, "")
			work := filepath.Join(dir, "fio")
			if err := os.Mkdir(work, 0o755); err != nil {
				t.Fatal(err)
			}
			jobFile := filepath.Join(t.TempDir(), "verify.fio")
			if err := os.WriteFile(jobFile, fmt.Appendf(nil, fioJobFile, work, fioJobSize, fioJobs), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "fio.json")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, fio, "--output-format=json", "--output="+out, jobFile)
			cmd.Dir = t.TempDir()
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stderr, &stderr
			start := time.Now()
			runErr := cmd.Run()
			raw, _ := os.ReadFile(out)
			if runErr != nil {
				t.Fatalf("fio: %v\n%s\n%s", runErr, stderr.String(), tail(raw, 4000))
			}
			var rep fioReport
			// fio may print notes before the JSON document.
			if i := bytes.IndexByte(raw, '{'); i < 0 || json.Unmarshal(raw[i:], &rep) != nil {
				t.Fatalf("fio: no JSON report:\n%s\n%s", tail(raw, 4000), stderr.String())
			}
			if len(rep.Jobs) != 3*fioJobs {
				t.Fatalf("fio reported %d jobs, want %d", len(rep.Jobs), 3*fioJobs)
			}
			for _, j := range rep.Jobs {
				size := int64(fioJobSize)
				if j.Name == "mmap-write" {
					size = 16 << 20
				}
				if j.Error != 0 || j.Write.Bytes != size || j.Read.Bytes < size {
					t.Errorf("fio job %s: error %d, wrote %d bytes, verified (read) %d, want %d and %d\n%s",
						j.Name, j.Error, j.Write.Bytes, j.Read.Bytes, size, size, stderr.String())
				}
			}
			if strings.Contains(stderr.String(), "verify") {
				t.Errorf("fio reported a verify problem:\n%s", stderr.String())
			}
			// Every file on the server's disk at its full size.
			for _, name := range []string{"seq-write", "rand-write", "mmap-write"} {
				for i := range fioJobs {
					size := int64(fioJobSize)
					if name == "mmap-write" {
						size = 16 << 20
					}
					p := filepath.Join(srv.root, "fio", fmt.Sprintf("%s.%d.0", name, i))
					if st, err := os.Stat(p); err != nil || st.Size() != size {
						t.Errorf("%s on the server's disk: %v, %v; want %d bytes", p, st, err, size)
					}
				}
			}
			t.Logf("fio: %d jobs, %d MiB written and verified in %v", len(rep.Jobs),
				(2*fioJobs*fioJobSize+fioJobs*16<<20)>>20, time.Since(start).Round(time.Millisecond))
		})
	}
}

// tail returns the last n bytes of b as a string.
func tail(b []byte, n int) string {
	return string(b[max(0, len(b)-n):])
}
