package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

func decodeJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("decoding the answer (HTTP %d): %v", resp.StatusCode, err)
	}
}

// waitSnapshot polls snapshot id until it is ready or failed.
func waitSnapshot(t testing.TB, a *admin.Client, id string) admin.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		s, err := a.GetSnapshot(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Ready || s.Error != "" {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitClone polls the clone into dest until it is ready or failed.
func waitClone(t testing.TB, a *admin.Client, dest string) admin.Clone {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		c, err := a.GetClone(ctx, dest)
		if err != nil {
			t.Fatal(err)
		}
		if c.Ready || c.Error != "" {
			return c
		}
		time.Sleep(5 * time.Millisecond)
	}
}
