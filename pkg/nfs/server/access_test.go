package server

import (
	"net/netip"
	"testing"
)

// TestAccessBy: who may use an export, by certificate name or address,
// with and without RPC-with-TLS required.
func TestAccessBy(t *testing.T) {
	node := netip.MustParseAddr("10.0.0.5")
	other := netip.MustParseAddr("10.0.0.9")
	vol := Export{Path: "/vol", ExplicitClients: true,
		Clients: []netip.Prefix{netip.PrefixFrom(node, 32)}, Nodes: []string{"node-a"}, ReadOnlyNodes: []string{"node-r"}}
	static := Export{Path: "/", Clients: []netip.Prefix{netip.PrefixFrom(node, 32)}}
	for _, tc := range []struct {
		name        string
		e           *Export
		c           caller
		nameOnly    bool
		allowed, ro bool
	}{
		{"address", &vol, caller{addr: node}, false, true, false},
		{"another address", &vol, caller{addr: other}, false, false, false},
		{"name, another address", &vol, caller{addr: other, name: "node-a"}, false, true, false},
		{"read-only name", &vol, caller{addr: other, name: "node-r"}, false, true, true},
		{"unknown name, granted address", &vol, caller{addr: node, name: "node-x"}, false, true, false},
		{"required: name", &vol, caller{addr: other, name: "node-a"}, true, true, false},
		{"required: address alone", &vol, caller{addr: node}, true, false, false},
		{"required: unknown name at a granted address", &vol, caller{addr: node, name: "node-x"}, true, false, false},
		{"required: static export by address", &static, caller{addr: node, name: "admin-host"}, true, true, false},
		{"static export, another address", &static, caller{addr: other}, false, false, false},
	} {
		allowed, ro := tc.e.accessBy(tc.c, tc.nameOnly)
		if allowed != tc.allowed || ro != tc.ro {
			t.Errorf("%s: allowed %v read-only %v, want %v %v", tc.name, allowed, ro, tc.allowed, tc.ro)
		}
	}
}
