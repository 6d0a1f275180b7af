package lockd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/nfsrdma/nfsrdma-csi/internal/atomicfile"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsmstate"
)

// Files of the NSM state directory.
const (
	stateFile   = "state"        // the state number, decimal, as statd's /var/lib/nfs/statd/state holds it
	clientsFile = "clients.json" // the monitored clients
)

// Client is a monitored client: its NLM caller_name and the address its
// locks came from, where its NSM is notified after a restart.
type Client struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
}

// nsmStore is the status monitor's persistent state: this server's NSM
// state number and the clients to notify when it restarts.
type nsmStore struct {
	dir string

	mu      sync.Mutex
	st      int32
	clients map[Client]bool // monitored now
	prev    []Client        // recorded by the previous instance, to notify
}

// openNSMStore makes dir's state number the next odd one
// (nsmstate.Up: 1 for a new directory), writing it back before
// returning, and reads the clients recorded there.
func openNSMStore(dir string) (*nsmStore, error) {
	s := &nsmStore{dir: dir, clients: map[Client]bool{}, st: 1}
	if dir == "" {
		return s, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lockd: state dir: %w", err)
	}
	st, err := nsmstate.Up(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("lockd: %w", err)
	}
	s.st = st
	b, err := os.ReadFile(filepath.Join(dir, clientsFile))
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &s.prev); err != nil {
			return nil, fmt.Errorf("lockd: %s: %w", filepath.Join(dir, clientsFile), err)
		}
		for _, c := range s.prev {
			s.clients[c] = true // still to notify: kept until notified
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return nil, fmt.Errorf("lockd: %w", err)
	}
	return s, nil
}

func (s *nsmStore) state() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (s *nsmStore) notifyList() []Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.prev)
}

// add records a client, persisting the list when it is new.
func (s *nsmStore) add(name, addr string) error {
	c := Client{Name: name, Addr: addr}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clients[c] {
		return nil
	}
	s.clients[c] = true
	if err := s.saveLocked(); err != nil {
		delete(s.clients, c)
		return err
	}
	return nil
}

// match returns the names of the clients called name or recorded at
// address name, and recorded at address peer (any, when peer is empty).
func (s *nsmStore) match(name, peer string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for c := range s.clients {
		if (c.Name == name || c.Addr == name) && (peer == "" || c.Addr == peer) {
			out = append(out, c.Name)
		}
	}
	return out
}

// remove forgets the clients called name.
func (s *nsmStore) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for c := range s.clients {
		if c.Name == name {
			delete(s.clients, c)
			changed = true
		}
	}
	if changed {
		s.saveLocked()
	}
}

// notified forgets client c after it was sent SM_NOTIFY.
func (s *nsmStore) notified(c Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clients[c] {
		delete(s.clients, c)
		s.saveLocked()
	}
}

func (s *nsmStore) sortedLocked() []Client {
	out := make([]Client, 0, len(s.clients))
	for c := range s.clients {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Client) int {
		if a.Name != b.Name {
			return strings.Compare(a.Name, b.Name)
		}
		return strings.Compare(a.Addr, b.Addr)
	})
	return out
}

func (s *nsmStore) saveLocked() error {
	if s.dir == "" {
		return nil
	}
	b, err := json.MarshalIndent(s.sortedLocked(), "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(s.dir, clientsFile), append(b, '\n'))
}
