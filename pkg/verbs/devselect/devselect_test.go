package devselect

import (
	"errors"
	"os"
	"testing"
)

func TestOverrideSIW(t *testing.T) {
	d, c, err := Select("127.0.0.1", "siw")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if c.Provider != ProviderSIW || d.Transport() != "iwarp" || c.Reason != "override siw" {
		t.Fatalf("choice %+v", c)
	}
}

func TestUnknownDevice(t *testing.T) {
	if _, c, err := Select("127.0.0.1", "no-such-dev9"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("override of a missing device: %v (%+v)", err, c)
	}
}

// TestAuto: with IBVERBS_DEVICE and IBVERBS_ADDR set (hack/test-ibverbs in
// the kernel peer's guest, where rdma_cm reaches IBVERBS_ADDR on that
// device), Select chooses that device, also by name; otherwise software
// iWARP with the reason.
func TestAuto(t *testing.T) {
	want, addr := os.Getenv("IBVERBS_DEVICE"), os.Getenv("IBVERBS_ADDR")
	if addr == "" {
		addr = "127.0.0.1"
	}
	d, c, err := Select(addr+":20049", "")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	t.Logf("choice: %v", c)
	if want == "" {
		if c.Provider != ProviderSIW || c.Reason == "" {
			t.Fatalf("choice %+v", c)
		}
		return
	}
	if c.Provider != ProviderIbverbs || c.Device != want || d.Name() != want {
		t.Fatalf("choice %+v, want ibverbs %s", c, want)
	}
	d2, c2, err := Select(addr, want)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if c2.Provider != ProviderIbverbs || c2.Device != want {
		t.Fatalf("override %s: %+v", want, c2)
	}
	if n := Counts(); len(n) == 0 {
		t.Fatal("no counts")
	}
}
