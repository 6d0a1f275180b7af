package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/credits"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/deviceplugin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/mounter"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/nodecert"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/plugin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
)

func newControllerCmd() *cobra.Command {
	cfg := plugin.ControllerConfig{Version: version}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the CSI controller service (volumes, export access, snapshots) on a gRPC endpoint",
		Long: `Serve the CSI Identity and Controller services. Volumes are directories on an
export server, made and removed through the user-space NFS client over TCP (no
kernel mount); on the nfsrdma export server the controller also sets each
volume's quota and client list and takes snapshots and clones through its
admin API (authenticated with the token in --admin-token-file).`,
		Example: `  driver controller --endpoint unix:///csi/csi.sock --admin-token-file /etc/nfsrdma/admin/token`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return plugin.RunController(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint: unix:///path or tcp://host:port")
	f.StringVar(&cfg.AdminTokenFile, "admin-token-file", "", "file holding the bearer token of the export servers' admin API (empty: no admin API, third-party NFS servers only)")
	f.IntVar(&cfg.Ports.Admin, "admin-port", 20050, "TCP port of the export servers' admin API (0: none)")
	f.IntVar(&cfg.Ports.NFS, "nfs-port", nfs3.Port, "NFS/TCP port of the export servers (the controller's own connection)")
	f.IntVar(&cfg.Ports.RDMA, "rdma-port", nfs3.RDMAPort, "NFS/RDMA port of the export servers (what nodes mount)")
	f.IntVar(&cfg.Ports.Mount, "mount-port", mount3.Port, "MOUNT v3 TCP port of the export servers")
	f.IntVar(&cfg.Ports.NLM, "nlm-port", nlm.Port, "NLM v4 TCP port of the export servers, given to mounts as lockport= (0: mounts ask the server's rpcbind)")
	f.StringArrayVar(&cfg.Servers, "server", nil, "export server known from the start, for ListVolumes, ListSnapshots and GetCapacity, besides those the driver's PersistentVolumes name when there is a Kubernetes API (repeatable)")
	registerKube(f, &cfg.Kube)
	f.BoolVar(&cfg.CreditLedger, "credit-ledger", true, "keep each pod's RPC-over-RDMA credit grant in the ConfigMap nfsrdma-credits of --namespace (needs the Kubernetes API)")
	f.IntVar(&cfg.CreditsBudget, "credits-budget", credits.DefaultBudget, "credits each export server grants all pods together")
	f.BoolVar(&cfg.LeaderElection, "leader-election", false, "run the credit ledger only while holding the Lease nfsrdma-csi-credits (several replicas)")
	f.StringVar(&cfg.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: --namespace)")
	f.StringVar(&cfg.MetricsAddress, "metrics-address", "", "HOST:PORT of the Prometheus /metrics endpoint (empty: off)")
	f.StringVar(&cfg.HealthAddress, "health-address", "", "HOST:PORT of a /healthz endpoint that calls this plugin's CSI Probe, in place of the livenessprobe sidecar (empty: off)")
	f.StringVar(&cfg.NodeCerts.CASecret, "node-ca-secret", "", "Secret (tls.crt, tls.key) in --namespace of the CA that signs the nodes' RPC-with-TLS certificates: CSRs of signer "+nodecert.SignerName+" from --node-service-account are approved and signed; made with a new CA when absent (empty: off)")
	f.StringVar(&cfg.NodeCerts.NodeServiceAccount, "node-service-account", "", "ServiceAccount in --namespace of the node plugin: only its CSRs, made with a token bound to a pod on the node they name, are approved")
	f.DurationVar(&cfg.NodeCerts.Validity, "node-cert-validity", nodecert.DefaultValidity, "lifetime of a node certificate (a CSR may ask for less; nodes renew at 2/3 of it)")
	return cmd
}

// registerKube registers the flags that locate the Kubernetes API.
func registerKube(f *pflag.FlagSet, k *plugin.Kube) {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "kube-system"
	}
	f.StringVar(&k.Kubeconfig, "kubeconfig", "", "kubeconfig file of the Kubernetes API (default: in-cluster)")
	f.StringVar(&k.Namespace, "namespace", ns, "namespace of the credit ledger ConfigMap (default: $POD_NAMESPACE, else kube-system)")
}

func newNodeCmd() *cobra.Command {
	cfg := plugin.NodeConfig{Version: version}
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run the CSI node service (one FUSE mount per pod) on a gRPC endpoint",
		Long: `Serve the CSI Identity and Node services. NodePublishVolume opens /dev/fuse,
mounts it on the pod's target path and hands the fd to the mounter (driver
mounter, a separate process) which serves the NFS export through the
user-space NFS client, so that restarting this plugin never breaks a running
pod's mount. Needs root (mount(2)) and /dev/fuse.

With --register-with-kubelet it registers itself with kubelet's plugin
watcher (the socket <driver>-reg.sock in --plugin-registration-dir), in place
of the node-driver-registrar sidecar, and exits when kubelet rejects it;
--health-address serves /healthz in place of the livenessprobe sidecar.`,
		Example: `  driver node --endpoint unix:///csi/csi.sock --nodeid "$NODE_NAME" --node-address "$NODE_IP"
  driver node --endpoint unix:///csi/csi.sock --nodeid "$NODE_NAME" --register-with-kubelet \
    --kubelet-registration-path /var/lib/kubelet/plugins/nfsrdma.csi.dev/csi.sock \
    --plugin-registration-dir /registration --health-address :29753`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.CSI.KeeperSocket = besideSocket(cfg.CSI.KeeperSocket, cfg.CSI.MounterSocket, "keeper.sock")
			return plugin.RunNode(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.CSI.Endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint: unix:///path or tcp://host:port")
	registerRegistration(f, &cfg.Registration)
	f.StringVar(&cfg.HealthAddress, "health-address", "", "HOST:PORT of a /healthz endpoint that calls this plugin's CSI Probe, in place of the livenessprobe sidecar (empty: off)")
	f.StringVar(&cfg.CSI.NodeName, "nodeid", "", "this node's name (the node ID is NAME@ADDRESS)")
	f.StringVar(&cfg.CSI.NodeAddress, "node-address", "", "this node's IP address, granted on the export by ControllerPublishVolume (default: the first non-loopback address)")
	f.StringVar(&cfg.CSI.MounterSocket, "mounter-socket", "/run/nfsrdma/mounter.sock", "unix socket of driver mounter")
	f.StringVar(&cfg.CSI.KeeperSocket, "keeper-socket", "", "unix socket on which this plugin keeps a duplicate of every mount's FUSE connection for driver mounter (its --keeper-socket), so that the mounts survive the death of the mounter's container (default: keeper.sock beside --mounter-socket; \"none\": off)")
	f.StringVar(&cfg.CSI.TargetRoot, "target-root", "/var/lib/kubelet", "directory every target path must be under")
	f.DurationVar(&cfg.CSI.UnmountTimeout, "unmount-timeout", 0, "how long NodeUnpublishVolume retries a busy unmount before a lazy one (default 10s)")
	registerKube(f, &cfg.Kube)
	f.BoolVar(&cfg.CreditLedger, "credit-ledger", true, "read each pod's credit grant from the ledger ConfigMap (needs the Kubernetes API)")
	f.BoolVar(&cfg.DevicePlugin, "device-plugin", false, "advertise this node's RDMA devices to kubelet (device-plugin API)")
	f.StringVar(&cfg.DevicePluginOptions.PluginDir, "device-plugin-dir", deviceplugin.DefaultPluginDir, "kubelet's device-plugin directory")
	f.StringVar(&cfg.DevicePluginOptions.ResourceName, "resource-name", deviceplugin.DefaultResourceName, "extended resource name of the RDMA devices")
	f.StringVar(&cfg.MetricsAddress, "metrics-address", "", "HOST:PORT of the Prometheus /metrics endpoint, with each pod's mount metrics (empty: off)")
	f.StringVar(&cfg.NodeCertFile, "node-cert", "", "file kept holding this node's RPC-with-TLS key and certificate (PEM, replaced whole), obtained through a CSR of signer "+nodecert.SignerName+" and renewed at 2/3 of its lifetime; give it to driver mounter as --tls-cert and --tls-key (empty: off; needs the Kubernetes API)")
	f.DurationVar(&cfg.NodeCertValidity, "node-cert-validity", 0, "lifetime asked for in the node certificate's CSR (0: the signer's; at least 10m)")
	f.BoolVar(&cfg.EnableFUSEURing, "enable-fuse-uring", false, "turn on FUSE over io_uring in the kernel (/sys/module/fuse/parameters/enable_uring; needs a privileged container) for mounts with fuse_uring=auto or on")
	_ = cmd.MarkFlagRequired("nodeid")
	return cmd
}

func newMounterCmd() *cobra.Command {
	var s mounter.Server
	var metricsAddr string
	var probe bool
	cmd := &cobra.Command{
		Use:   "mounter",
		Short: "Serve FUSE mounts handed over by the node plugin, outliving its restarts",
		Long: `Listen on a unix socket for /dev/fuse file descriptors the node plugin has
mounted, and run one "driver mount --fuse-fd" process per mount. Run it as its
own container (or service) beside the node plugin: the mounts it serves
survive restarts of the node plugin, and a restarted mounter re-adopts the
mount processes still running (state in --state-dir). It also serves the
node's NLM/NSM lock callbacks (--lock-socket) for all its mounts: a lock
server's GRANTED for a blocked lock reaches the mount waiting for it, and its
SM_NOTIFY every mount holding locks on it.`,
		Example: `  driver mounter --socket /run/nfsrdma/mounter.sock --state-dir /var/lib/nfsrdma`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if probe {
				return probeMounter(cmd.Context(), s.Socket)
			}
			if v := cmd.Flags().Lookup("v"); v != nil && v.Value.String() != "0" {
				s.ExtraArgs = []string{"--v=" + v.Value.String()}
			}
			s.Keeper = besideSocket(s.Keeper, s.Socket, "keeper.sock")
			s.LockSocket = besideSocket(s.LockSocket, s.Socket, "lockd.sock")
			go serveMetrics(cmd.Context(), metricsAddr, newRegistry(metrics.NewNLMCallbackCollector(s.CallbackCounts)))
			return s.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&s.Socket, "socket", "/run/nfsrdma/mounter.sock", "unix socket to listen on")
	f.StringVar(&s.StateDir, "state-dir", "/var/lib/nfsrdma/mounts", "directory for the state and log of each mount")
	f.BoolVar(&s.TakeOver, "takeover", false, "at start, hand every mount recorded in --state-dir whose process (of a previous mounter, e.g. the pod this one replaces) listens on its handover socket to a new mount process of this binary: an upgrade that applications see as a pause")
	f.StringVar(&s.LockSocket, "lock-socket", "", "unix socket of the node's lock callback service: one NLM/NSM callback service (GRANTED, GRANTED_MSG, SM_NOTIFY) for every mount of the node, and the node's status monitor for its own lock managers (SM_STAT, SM_MON, SM_UNMON, SM_UNMON_ALL), registered with the node's rpcbind, which the mount processes attach to (default: lockd.sock beside --socket; \"none\": each mount process serves its own)")
	f.StringVar(&s.Keeper, "keeper-socket", "", "unix socket of the node plugin's keeper of the mounts' FUSE connections (driver node --keeper-socket): at start, the mounts whose processes died with a previous mounter are taken up again on its duplicates (default: keeper.sock beside --socket; \"none\": off)")
	f.StringVar(&metricsAddr, "metrics-address", "", "HOST:PORT of the Prometheus /metrics endpoint: the lock callbacks received and routed to mounts (empty: off)")
	f.StringVar(&s.TLSCA, "tls-ca", "", "PEM file of the authorities of the export servers' certificates, given to mounts with xprtsec=tls or mtls as --tls-ca (empty: the system's roots)")
	f.StringVar(&s.TLSCert, "tls-cert", "", "PEM file of this node's certificate (driver node --node-cert), given to mounts with xprtsec=mtls as --tls-cert")
	f.StringVar(&s.TLSKey, "tls-key", "", "PEM file of the key of --tls-cert (the same file when it holds both), given to mounts with xprtsec=mtls as --tls-key")
	f.BoolVar(&probe, "probe", false, "exit 0 if the mounter at --socket answers (a readiness probe), else 1")
	return cmd
}

// besideSocket returns the socket path flag value v: "" is name in the
// directory of socket, "none" is "" (off).
func besideSocket(v, socket, name string) string {
	switch v {
	case "":
		return filepath.Join(filepath.Dir(socket), name)
	case "none":
		return ""
	}
	return v
}

// probeMounter is the readiness of a mounter: the mounter of this
// container (the socket's peer is in this PID namespace: during a rolling
// update the socket path may still lead to the pod being replaced)
// answers on socket, which it does once it has taken its mounts over
// (--takeover).
func probeMounter(ctx context.Context, socket string) error {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		return err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		cerr = err
	}
	c.Close()
	if cerr != nil {
		return cerr
	}
	if cred.Pid == 0 {
		return fmt.Errorf("%s is served by a mounter of another pod (not ready yet)", socket)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = (&mounter.Client{Socket: socket}).List(ctx)
	return err
}
