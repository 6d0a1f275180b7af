//go:build !ibverbs || !cgo

package devselect

import "testing"

func TestWithoutTag(t *testing.T) {
	d, c, err := Select("192.0.2.1", "")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if c.Provider != ProviderSIW || c.Reason != "built without the ibverbs tag" {
		t.Fatalf("choice %+v", c)
	}
	if _, _, err := Select("192.0.2.1", "ibverbs"); err == nil {
		t.Fatal("override ibverbs without the tag succeeded")
	}
}
