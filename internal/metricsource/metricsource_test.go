package metricsource

import (
	"reflect"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/fusefs"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/devselect"
)

// fill sets every integer field of the struct v points to a distinct
// value (1, 2, ...) and every string field to its name.
func fill(v any) {
	s := reflect.ValueOf(v).Elem()
	for i := range s.NumField() {
		f := s.Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.String:
			f.SetString(s.Type().Field(i).Name)
		case reflect.Bool:
			f.SetBool(true)
		}
	}
}

// sameFields checks that every field of got has the value of the field of
// src with the same name (converted), for fields src has.
func sameFields(t *testing.T, src, got any, skip ...string) {
	t.Helper()
	sv, gv := reflect.ValueOf(src), reflect.ValueOf(got)
	n := 0
	for i := range gv.NumField() {
		name := gv.Type().Field(i).Name
		sf := sv.FieldByName(name)
		if !sf.IsValid() || sf.Kind() == reflect.Map {
			continue
		}
		n++
		if a, b := sf.Interface(), gv.Field(i).Convert(sf.Type()).Interface(); a != b {
			t.Errorf("%s: %v, want %v", name, b, a)
		}
	}
	for i := range sv.NumField() {
		name := sv.Type().Field(i).Name
		if _, ok := gv.Type().FieldByName(name); !ok && !contains(skip, name) {
			t.Errorf("%s of %s is not carried to %s", name, sv.Type(), gv.Type())
		}
	}
	if n == 0 {
		t.Fatal("no field compared")
	}
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// Every counter of rpcrdma.Metrics reaches metrics.TransportStats under
// its name (Continued is not exported), RDMA2_ERROR codes by name.
func TestTransport(t *testing.T) {
	var m rpcrdma.Metrics
	fill(&m)
	m.Errors2 = map[rpcrdma.Errcode2]uint64{rpcrdma.Err2Vers: 3, rpcrdma.Err2BadXDR: 4}
	got := Transport(func() rpcrdma.Metrics { return m })()
	sameFields(t, m, got, "Continued")
	if len(got.Errors2) != 2 || got.Errors2[metrics.Err2VersName] != 3 || got.Errors2[rpcrdma.Err2BadXDR.String()] != 4 {
		t.Errorf("Errors2 %v", got.Errors2)
	}
}

func TestConnections(t *testing.T) {
	var c rpcrdma.ConnInfo
	fill(&c)
	got := Connections(func() []rpcrdma.ConnInfo { return []rpcrdma.ConnInfo{c} })()
	if len(got) != 1 {
		t.Fatalf("%d connections", len(got))
	}
	sameFields(t, c, got[0], "Verbs")
}

func TestDRC(t *testing.T) {
	var d nfsserver.DRCStats
	fill(&d)
	sameFields(t, d, DRC(func() nfsserver.DRCStats { return d })())
}

func TestMountMemory(t *testing.T) {
	var m fusefs.MemoryStats
	fill(&m)
	m.Write = client.WriteStats{VerifierChanges: 100, ResentBytes: 200}
	got := MountMemory(func() fusefs.MemoryStats { return m })()
	sameFields(t, m, got, "Write")
	if got.VerifierChanges != 100 || got.ResentBytes != 200 || got.WriteBehindLimit != fusefs.MountWriteBehindBytes || got.UncommittedLimit != fusefs.MountDirtyBytes {
		t.Errorf("%+v", got)
	}
}

// A device choice made in this process is counted.
func TestDevices(t *testing.T) {
	count := func(ch devselect.Choice) uint64 {
		for _, c := range Devices() {
			if c.Provider == ch.Provider && c.Device == ch.Device && c.Transport == ch.Transport {
				return c.N
			}
		}
		return 0
	}
	dev, ch, err := devselect.Select("127.0.0.1", devselect.OverrideSIW)
	if err != nil {
		t.Fatal(err)
	}
	dev.Close()
	before := count(ch)
	dev, _, err = devselect.Select("127.0.0.1", devselect.OverrideSIW)
	if err != nil {
		t.Fatal(err)
	}
	dev.Close()
	if n := count(ch); n != before+1 || n < 2 {
		t.Errorf("count %d after %d, want one more", n, before)
	}
}
