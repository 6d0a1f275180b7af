package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// statusOnly is a Service answering Status (every other method is left
// to the nil embedded Service: the tests call none).
type statusOnly struct{ Service }

func (statusOnly) Status() (Status, error) { return Status{Version: "test"}, nil }

// secretVolume is a directory updated as kubelet updates a Secret volume
// (pkg/volume/util AtomicWriter): the files live in a timestamped
// directory, "..data" is a symlink to it and each file a symlink through
// "..data"; an update writes a new directory, points a new symlink at it
// and renames that over "..data" (atomic), then removes the old one.
type secretVolume struct {
	dir string
	gen int
}

func newSecretVolume(t *testing.T, token string) *secretVolume {
	t.Helper()
	v := &secretVolume{dir: t.TempDir()}
	v.update(t, token)
	if err := os.Symlink(filepath.Join("..data", "token"), filepath.Join(v.dir, "token")); err != nil {
		t.Fatal(err)
	}
	return v
}

func (v *secretVolume) path() string { return filepath.Join(v.dir, "token") }

func (v *secretVolume) update(t *testing.T, token string) {
	t.Helper()
	v.gen++
	ts := fmt.Sprintf("..2026_12_06_03_00_%02d.%d", v.gen, v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v.dir, ts, "token"), []byte(token+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	if err := os.Symlink(ts, filepath.Join(v.dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(v.dir, "..data_tmp"), filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTokenRotation rotates the token of a Secret volume the way kubelet
// does (an atomic swap of the ..data symlink) under a running handler and
// clients on real sockets: the new token is required and used from the
// next request, without a restart, the old one accepted only for the
// grace period; and no token ever shows in an error or a log line.
func TestTokenRotation(t *testing.T) {
	logs := testenv.CaptureKlog(t, 5)
	const tok1, tok2, tok3 = "first-token-5f0c1e", "second-token-9a7d2b", "third-token-c41e08"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	srvVol := newSecretVolume(t, tok1)
	srvTok, err := NewTokenFile(srvVol.path())
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewTokenHandler(statusOnly{}, srvTok)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	ctlVol := newSecretVolume(t, tok1)
	ctlTok, err := NewTokenFile(ctlVol.path())
	if err != nil {
		t.Fatal(err)
	}
	ctl := NewTokenClient(srv.URL, ctlTok, nil)
	var errs []error
	call := func(c *Client) error {
		_, err := c.Status(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		return err
	}
	if err := call(ctl); err != nil {
		t.Fatal(err)
	}

	// the server's Secret is updated first: the controller's old token is
	// still accepted within the grace period
	srvVol.update(t, tok2)
	if err := call(ctl); err != nil {
		t.Fatalf("old token within the grace period: %v", err)
	}
	if err := call(NewClient(srv.URL, tok2, nil)); err != nil {
		t.Fatalf("new token: %v", err)
	}
	// then the controller's: it sends the new one
	ctlVol.update(t, tok2)
	if got, _ := ctlTok.Token(); got != tok2 {
		t.Fatalf("controller's token not reread after the swap")
	}
	if err := call(ctl); err != nil {
		t.Fatal(err)
	}

	// the controller's Secret is updated first: the server answers 401 to
	// the new token, and the client sends the request again with the
	// previous one
	ctlVol.update(t, tok3)
	if err := call(ctl); err != nil {
		t.Fatalf("controller rotated before the server: %v", err)
	}
	srvVol.update(t, tok3)
	if err := call(ctl); err != nil {
		t.Fatal(err)
	}

	// past the grace period, the previous tokens are refused
	srvTok.mu.Lock()
	srvTok.grace = 0
	srvTok.mu.Unlock()
	time.Sleep(time.Millisecond)
	for _, old := range []string{tok1, tok2} {
		if err := call(NewClient(srv.URL, old, nil)); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("old token after the grace period: %v", err)
		}
	}
	if err := call(NewClient(srv.URL, tok3, nil)); err != nil {
		t.Fatal(err)
	}

	// a token file that goes away keeps the last token
	if err := os.Remove(srvVol.path()); err != nil {
		t.Fatal(err)
	}
	if err := call(NewClient(srv.URL, tok3, nil)); err != nil {
		t.Fatalf("token file removed: %v", err)
	}

	// an empty token file cannot start a handler or a client
	empty := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewTokenFile(empty); err == nil {
		t.Fatal("an empty token file was taken")
	}

	out := logs.String()
	if !strings.Contains(out, "admin: token rotated") || !strings.Contains(out, "bad or missing token") {
		t.Errorf("logs lack the rotation or the refusal:\n%s", out)
	}
	for _, tok := range []string{tok1, tok2, tok3} {
		if strings.Contains(out, tok) {
			t.Errorf("token %q in the logs:\n%s", tok, out)
		}
		for _, err := range errs {
			if strings.Contains(err.Error(), tok) {
				t.Errorf("token %q in an error: %v", tok, err)
			}
		}
	}
}
