package main

import (
	"github.com/spf13/pflag"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/plugin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/registration"
)

// registerRegistration registers the flags of the node plugin's own
// registration with kubelet's plugin watcher, in place of the
// node-driver-registrar sidecar (whose flag names they follow).
func registerRegistration(f *pflag.FlagSet, r *plugin.Registration) {
	f.BoolVar(&r.Enabled, "register-with-kubelet", false, "register with kubelet's plugin watcher from this process (a socket in --plugin-registration-dir), in place of the node-driver-registrar sidecar")
	f.StringVar(&r.Path, "kubelet-registration-path", "", "path of the CSI socket as kubelet sees it on the host, e.g. /var/lib/kubelet/plugins/"+csi.DriverName+"/csi.sock (default: the path of --endpoint)")
	f.StringVar(&r.Dir, "plugin-registration-dir", registration.DefaultDir, "kubelet's plugin registration directory (<kubelet root>/plugins_registry) as this process sees it")
}
