package fusefs

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzStateMap: a state map cut or garbled anywhere (a crash mid-record,
// a foreign file) reads as an error or as a state whose files all name a
// node of it or the root, never a panic.
func FuzzStateMap(f *testing.F) {
	f.Add([]byte(`{"init":{"Major":7,"Minor":45}}` + "\n" + `{"n":2,"fh":"AQI=","ino":5,"gen":1,"mode":32768}` + "\n" + `{"f":1,"n":2}` + "\n" + `{"r":1}` + "\n"))
	f.Add([]byte(`{"init":{"Major":7}}` + "\n" + `{"f":3,"n":9,"dir":true}` + "\n" + `{"n":`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "map")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := readStateMap(p)
		if err != nil {
			return
		}
		nodes := map[uint64]bool{1: true}
		for _, n := range s.Nodes {
			nodes[n.ID] = true
		}
		for _, hf := range s.Files {
			if !nodes[hf.Node] {
				t.Fatalf("file handle %d of unknown node %d", hf.FH, hf.Node)
			}
		}
	})
}

// FuzzDirentplus: the READDIRPLUS reply parser stops at a truncated entry
// and never reads past the buffer.
func FuzzDirentplus(f *testing.F) {
	e := make([]byte, 128+24+8)
	e[0] = 7
	e[128+16] = 3
	f.Add(e)
	f.Add(e[:100])
	f.Fuzz(func(t *testing.T, b []byte) {
		var m *stateMap
		m.direntplus(b) // nil map: nothing recorded
		walkDirentplus(b, func(uint64) {})
	})
}
