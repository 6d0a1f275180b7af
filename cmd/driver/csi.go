package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/credits"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/deviceplugin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/mounter"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
)

func newControllerCmd() *cobra.Command {
	var (
		endpoint, tokenFile  string
		ports                csi.ServerPorts
		servers              []string
		kube                 kubeFlags
		ledger, elect        bool
		budget               int
		electNS, metricsAddr string
		healthAddr           string
	)
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
			token := ""
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("admin token: %w", err)
				}
				token = strings.TrimSpace(string(b))
			}
			cm := metrics.NewCSI(nil)
			d, err := csi.New(csi.Config{Version: version, Endpoint: endpoint, Controller: true,
				Ports: ports, AdminToken: token, Servers: servers, Metrics: cm})
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ledger {
				if c, err := kube.client(); err != nil {
					klog.InfoS("controller: no Kubernetes API: the credit ledger is off", "err", err)
				} else {
					l := credits.New(credits.Config{Client: c, Namespace: kube.namespace, DriverName: csi.DriverName, Budget: budget,
						Push: csi.CreditPusher(ports, token)})
					if elect {
						if electNS == "" {
							electNS = kube.namespace
						}
						id, _ := os.Hostname()
						go l.RunElected(ctx, electNS, "nfsrdma-csi-credits", id+"-"+strconv.Itoa(os.Getpid()))
					} else {
						go func() {
							if err := l.Run(ctx); err != nil {
								klog.ErrorS(err, "controller: credit ledger stopped")
							}
						}()
					}
				}
			}
			go serveMetrics(ctx, metricsAddr, newRegistry(cm))
			go serveHealth(ctx, healthAddr, endpoint)
			return d.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint: unix:///path or tcp://host:port")
	f.StringVar(&tokenFile, "admin-token-file", "", "file holding the bearer token of the export servers' admin API (empty: no admin API, third-party NFS servers only)")
	f.IntVar(&ports.Admin, "admin-port", 20050, "TCP port of the export servers' admin API (0: none)")
	f.IntVar(&ports.NFS, "nfs-port", 2049, "NFS/TCP port of the export servers (the controller's own connection)")
	f.IntVar(&ports.RDMA, "rdma-port", 20049, "NFS/RDMA port of the export servers (what nodes mount)")
	f.IntVar(&ports.Mount, "mount-port", 20048, "MOUNT v3 TCP port of the export servers")
	f.IntVar(&ports.NLM, "nlm-port", 4045, "NLM v4 TCP port of the export servers, given to mounts as lockport= (0: mounts ask the server's rpcbind)")
	f.StringArrayVar(&servers, "server", nil, "export server known from the start, for ListVolumes, ListSnapshots and GetCapacity (repeatable)")
	kube.register(f)
	f.BoolVar(&ledger, "credit-ledger", true, "keep each pod's RPC-over-RDMA credit grant in the ConfigMap nfsrdma-credits of --namespace (needs the Kubernetes API)")
	f.IntVar(&budget, "credits-budget", credits.DefaultBudget, "credits each export server grants all pods together")
	f.BoolVar(&elect, "leader-election", false, "run the credit ledger only while holding the Lease nfsrdma-csi-credits (several replicas)")
	f.StringVar(&electNS, "leader-election-namespace", "", "namespace of the leader election Lease (default: --namespace)")
	f.StringVar(&metricsAddr, "metrics-address", "", "HOST:PORT of the Prometheus /metrics endpoint (empty: off)")
	f.StringVar(&healthAddr, "health-address", "", "HOST:PORT of a /healthz endpoint that calls this plugin's CSI Probe, in place of the livenessprobe sidecar (empty: off)")
	return cmd
}

// kubeFlags locate the Kubernetes API: --kubeconfig, else in-cluster.
type kubeFlags struct{ kubeconfig, namespace string }

func (k *kubeFlags) register(f *pflag.FlagSet) {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "kube-system"
	}
	f.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig file of the Kubernetes API (default: in-cluster)")
	f.StringVar(&k.namespace, "namespace", ns, "namespace of the credit ledger ConfigMap (default: $POD_NAMESPACE, else kube-system)")
}

// client returns an API client, or an error when there is no API to talk to.
func (k *kubeFlags) client() (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if k.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", k.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "nfsrdma-csi/" + version
	return kubernetes.NewForConfig(cfg)
}

func newNodeCmd() *cobra.Command {
	var (
		cfg                   csi.Config
		kube                  kubeFlags
		dp                    deviceplugin.Options
		devicePlugin, useKube bool
		metricsAddr           string
		healthAddr            string
		reg                   registrationFlags
	)
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
			cfg.Version, cfg.Node = version, true
			if cfg.NodeAddress == "" {
				cfg.NodeAddress = defaultAddress()
				klog.InfoS("node: --node-address not set; using a local address", "address", cfg.NodeAddress)
			}
			ctx := cmd.Context()
			if useKube {
				c, err := kube.client()
				if err != nil {
					klog.InfoS("node: no Kubernetes API: mounts use the StorageClass credits, not the ledger's", "err", err)
				} else {
					cfg.Kube, cfg.LedgerNamespace, cfg.LedgerName = c, kube.namespace, credits.DefaultName
				}
			}
			cm := metrics.NewCSI(nil)
			cfg.Metrics = cm
			d, err := csi.New(cfg)
			if err != nil {
				return err
			}
			mc := metrics.NewMountCollector(func(ctx context.Context) ([]metrics.MountTarget, error) {
				ms, err := (&mounter.Client{Socket: cfg.MounterSocket}).List(ctx)
				var ts []metrics.MountTarget
				for _, m := range ms {
					if m.MetricsSocket != "" {
						ts = append(ts, metrics.MountTarget{Socket: m.MetricsSocket,
							Labels: prometheus.Labels{"volume": m.VolumeID, "pod": m.PodUID}})
					}
				}
				return ts, err
			})
			if devicePlugin {
				p, err := deviceplugin.New(dp)
				if err != nil {
					return err
				}
				go func() {
					if err := p.Run(ctx); err != nil {
						klog.ErrorS(err, "node: device plugin stopped")
					}
				}()
			}
			go serveMetrics(ctx, metricsAddr, newRegistry(cm, mc))
			go serveHealth(ctx, healthAddr, cfg.Endpoint)
			l, err := csi.Listen(cfg.Endpoint)
			if err != nil {
				return err
			}
			if !reg.enabled {
				return d.Serve(ctx, l)
			}
			return serveRegistered(ctx, d, l, &reg, cfg.Endpoint)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint: unix:///path or tcp://host:port")
	reg.register(f)
	f.StringVar(&healthAddr, "health-address", "", "HOST:PORT of a /healthz endpoint that calls this plugin's CSI Probe, in place of the livenessprobe sidecar (empty: off)")
	f.StringVar(&cfg.NodeName, "nodeid", "", "this node's name (the node ID is NAME@ADDRESS)")
	f.StringVar(&cfg.NodeAddress, "node-address", "", "this node's IP address, granted on the export by ControllerPublishVolume (default: the first non-loopback address)")
	f.StringVar(&cfg.MounterSocket, "mounter-socket", "/run/nfsrdma/mounter.sock", "unix socket of driver mounter")
	f.StringVar(&cfg.TargetRoot, "target-root", "/var/lib/kubelet", "directory every target path must be under")
	f.DurationVar(&cfg.UnmountTimeout, "unmount-timeout", 0, "how long NodeUnpublishVolume retries a busy unmount before a lazy one (default 10s)")
	kube.register(f)
	f.BoolVar(&useKube, "credit-ledger", true, "read each pod's credit grant from the ledger ConfigMap (needs the Kubernetes API)")
	f.BoolVar(&devicePlugin, "device-plugin", false, "advertise this node's RDMA devices to kubelet (device-plugin API)")
	f.StringVar(&dp.PluginDir, "device-plugin-dir", deviceplugin.DefaultPluginDir, "kubelet's device-plugin directory")
	f.StringVar(&dp.ResourceName, "resource-name", deviceplugin.DefaultResourceName, "extended resource name of the RDMA devices")
	f.StringVar(&metricsAddr, "metrics-address", "", "HOST:PORT of the Prometheus /metrics endpoint, with each pod's mount metrics (empty: off)")
	_ = cmd.MarkFlagRequired("nodeid")
	return cmd
}

// defaultAddress returns the first global unicast IPv4 address, else
// 127.0.0.1.
func defaultAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

func newMounterCmd() *cobra.Command {
	var s mounter.Server
	cmd := &cobra.Command{
		Use:   "mounter",
		Short: "Serve FUSE mounts handed over by the node plugin, outliving its restarts",
		Long: `Listen on a unix socket for /dev/fuse file descriptors the node plugin has
mounted, and run one "driver mount --fuse-fd" process per mount. Run it as its
own container (or service) beside the node plugin: the mounts it serves
survive restarts of the node plugin, and a restarted mounter re-adopts the
mount processes still running (state in --state-dir).`,
		Example: `  driver mounter --socket /run/nfsrdma/mounter.sock --state-dir /var/lib/nfsrdma`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if v := cmd.Flags().Lookup("v"); v != nil && v.Value.String() != "0" {
				s.ExtraArgs = []string{"--v=" + v.Value.String()}
			}
			return s.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&s.Socket, "socket", "/run/nfsrdma/mounter.sock", "unix socket to listen on")
	f.StringVar(&s.StateDir, "state-dir", "/var/lib/nfsrdma/mounts", "directory for the state and log of each mount")
	return cmd
}
