package csi

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The servers ListVolumes, ListSnapshots and GetCapacity consult: those
// given at start, those named in calls, and those of the
// PersistentVolumes' handles (other formats ignored); a handle source not
// ready yet makes them Unavailable, never a shorter list.
func TestBackendServers(t *testing.T) {
	var handles []string
	var handlesErr error
	bs := newBackends(ServerPorts{}, nil, []string{"given.example"}, func() ([]string, error) { return handles, handlesErr })

	handles = []string{
		"1#pv.example#/#pvc-1#delete",
		"1#pv.example#/exports#pvc-2#retain",
		"1#other.example#/#pvc-3#delete",
		"not-one-of-ours",
	}
	got, err := bs.servers()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"given.example", "other.example", "pv.example"}; !slices.Equal(got, want) {
		t.Fatalf("servers %v, want %v", got, want)
	}

	handlesErr = errors.New("not listed yet")
	if _, err := bs.servers(); status.Code(err) != codes.Unavailable {
		t.Fatalf("servers with the handles not listed: %v, want Unavailable", err)
	}

	// the liveness probe checks only the servers given or named in calls
	if got := bs.seen(); !slices.Equal(got, []string{"given.example"}) {
		t.Fatalf("seen %v", got)
	}
}
