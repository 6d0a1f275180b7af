package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/exportd"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockd"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/volumes"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
)

func newServerCmd() *cobra.Command {
	var (
		cfg            = exportd.Config{Version: version}
		exports        []string
		metricsAddr    string
		rdmaReadChunks bool
		rdmaSendDDP    bool
		tlsCert        string
		tlsKey         string
		tlsClientCA    string
		tlsRevoked     string
		tlsMode        string
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the NFSv3 export server (NFS over RDMA and TCP, MOUNT v3 over TCP) on a local directory",
		Long: `Serve a local directory over NFS version 3 (RFC 1813), with MOUNT v3 on its
own port, until SIGINT or SIGTERM. Each --export names a directory under --root
as clients mount it ("/" is the root itself), the clients allowed (addresses
or CIDRs, comma-separated, or * for every client) and options (ro, rw,
root_squash, no_root_squash; default rw,root_squash). Without --export nothing
is exported but the volumes the admin API registers, each to the nodes it is
granted to.
NFS is also served over RPC-over-RDMA (RFC 8166/8267) on --rdma-port through the
software iWARP provider (0 turns it off). Each connection has --credits receive
buffers, the most it can be granted; it is granted its pod's credits (set by the
CSI controller through the admin API, per AUTH_SYS machine name NODE/NS/POD),
else --default-credits; the grants of all connections share --credits-budget
receives (max-min fair). Only the credits granted are posted as receives, so a
client that sends more calls than granted is disconnected (RFC 8166 3.3.1).
Each RDMA connection speaks the RPC-over-RDMA version of its first message:
version 2 (draft-ietf-nfsv4-rpcrdma-version-two) with our clients, version 1
with Linux and other clients; --rdma-version 1 serves version 1 only (version 2
is answered ERR_VERS and the client falls back). On version 2, a reply too large
for the client's receive buffers and Reply chunk (READDIRPLUS of a large
directory) is exposed in a Read chunk the client pulls, when the client
announces responder-provided Read chunks; --rdma-read-chunks=false turns that off.

File locks: NLM v4 (fcntl and flock locks of NFS clients, coherent across every
client of the server) is served on --nlm-port and NSM v1 (reboot notification)
on --nsm-port, over TCP. Each client that locks is recorded in --nsm-state-dir;
after a restart the server sends them SM_NOTIFY and, for --grace-period, grants
only the locks they reclaim. When a local rpcbind answers on 127.0.0.1:111, NFS,
MOUNT, NLM and NSM are registered with it (--rpcbind) so that clients such as
Linux's find them; the registrations are removed at exit.

With --admin-listen, the admin API the CSI controller uses (HTTP + JSON, bearer
token from --admin-token-file, required) is served on its own address: it
registers volume directories as their own exports ("/" + path) with a quota
(NFS3ERR_NOSPC past it; FSSTAT reports it) and a client list (empty: nobody),
and makes server-side snapshots (into --snapshot-dir) and clones. The registry
is kept in --state-dir and survives restarts; the server makes and removes the
volume directories itself, so the controller needs no NFS access. Bind the
admin API to an address the pod network cannot reach. A root export (--export
/:CLIENTS) holds every volume, and handles obtained through it bypass volume
quotas and client lists: give it to administrators' hosts only, with a
--handle-key-file.`,
		Example: `  driver server --root /srv/nfs --export /vol1:10.0.0.0/8:rw --export /vol2:127.0.0.1:ro
  mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=20048 127.0.0.1:/vol1 /mnt
  driver server --root /srv/nfs --admin-listen 10.0.0.1:20050 --admin-token-file /etc/nfsrdma/admin-token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range exports {
				e, err := nfsserver.ParseExport(s)
				if err != nil {
					return err
				}
				cfg.Exports = append(cfg.Exports, e)
			}
			if cfg.AdminListen == "" && !cmd.Flags().Changed("state-dir") {
				// no admin API and no explicit --state-dir: use the default
				// state directory only if a registry is there to restore
				if _, err := os.Stat(filepath.Join(cfg.StateDir, volumes.StateFileName)); err != nil {
					cfg.StateDir = ""
				}
			}
			if !cmd.Flags().Changed("nsm-state-dir") && cfg.StateDir != "" {
				cfg.Locks.StateDir = filepath.Join(cfg.StateDir, "nsm")
			}
			if metricsAddr != "" {
				cfg.Metrics = func(ctx context.Context, cs ...prometheus.Collector) {
					serveMetrics(ctx, metricsAddr, newRegistry(cs...))
				}
			}
			switch tlsMode {
			case "optional", "required":
			default:
				return fmt.Errorf("--tls=%q: want optional or required", tlsMode)
			}
			if tlsCert != "" || tlsKey != "" || tlsClientCA != "" || tlsRevoked != "" || tlsMode == "required" {
				var err error
				if cfg.TLS, err = exportd.LoadTLS(tlsCert, tlsKey, tlsClientCA, tlsRevoked); err != nil {
					return err
				}
				cfg.TLSRequired = tlsMode == "required"
				if cfg.TLSRequired && tlsClientCA == "" {
					return errors.New("--tls=required needs --tls-client-ca: nodes are known by their certificates")
				}
			}
			cfg.RDMA.NoResponderReadChunks = !rdmaReadChunks
			if rdmaSendDDP {
				cfg.RDMA.SendDDP = true
				cfg.RDMA.Inline = max(cfg.RDMA.Inline, rpcrdma.SDDPInline)
			}
			return exportd.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Root, "root", "", "local directory to serve (required)")
	f.StringArrayVar(&exports, "export", nil, "export PATH:CLIENTS[:OPTS]: CLIENTS addresses or CIDRs (comma-separated) or *, OPTS ro|rw,root_squash|no_root_squash (default rw,root_squash); repeatable; none: only the admin API's volumes")
	f.StringVar(&cfg.HandleKeyFile, "handle-key-file", "", "file holding the secret that authenticates file handles (default: derived from the root directory)")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1", "address to listen on")
	f.IntVar(&cfg.NFSPort, "nfs-port", nfs3.Port, "TCP port of NFS v3")
	f.IntVar(&cfg.MountPort, "mount-port", mount3.Port, "TCP port of MOUNT v3")
	f.IntVar(&cfg.RDMAPort, "rdma-port", nfs3.RDMAPort, "port of NFS over RDMA (software iWARP); 0: off")
	f.StringVar(&metricsAddr, "metrics-address", "", "HOST:PORT of the Prometheus /metrics endpoint: RPCs by procedure with latency, RPC-over-RDMA transport counters, volume quota and usage (empty: off)")
	f.IntVar(&cfg.RDMA.Credits, "credits", 32, "RPC-over-RDMA receive buffers per connection: the most credits a connection can be granted")
	f.IntVar(&cfg.RDMA.Grant, "default-credits", 0, "RPC-over-RDMA credits granted to a connection whose AUTH_SYS machine has no grant from the admin API (0: --credits)")
	f.IntVar(&cfg.RDMA.Budget, "credits-budget", 0, "RPC-over-RDMA receives posted over all connections, shared max-min fair (0: no bound)")
	f.IntVar(&cfg.RDMA.MaxVersion, "rdma-version", 2, "highest RPC-over-RDMA version served: 2 (version 1 or 2, as each client opens) or 1 (version 1 only)")
	f.BoolVar(&rdmaReadChunks, "rdma-read-chunks", true, "RPC-over-RDMA version 2: return a reply too large for the client's reply buffers in a Read chunk the client pulls (responder-provided Read chunks), with clients that announce them")
	f.BoolVar(&rdmaSendDDP, "rdma-send-ddp", true, "RPC-over-RDMA version 2: announce send-based DDP (send and receive buffers of 16 KiB whose pages after the first take WRITE and READ data of up to 12 KiB in place), with clients that announce it too; false: 4 KiB buffers, data in chunks")
	f.StringVar(&cfg.AdminListen, "admin-listen", "", "HOST:PORT of the admin API (HTTP, bearer token); empty: off")
	f.StringVar(&cfg.AdminTokenFile, "admin-token-file", "", "file holding the admin API's bearer token (required with --admin-listen)")
	f.StringVar(&cfg.StateDir, "state-dir", "/var/lib/nfsrdma-server", "directory of the volume registry (volumes, quotas, client lists, snapshots); empty: in memory only. Without --admin-listen, the default is used only if it holds a registry")
	f.StringVar(&cfg.SnapshotDir, "snapshot-dir", "", "directory of the snapshots, not beneath --root (default: STATE-DIR/snapshots)")
	f.IntVar(&cfg.NLMPort, "nlm-port", 0, "TCP port of NLM v4, the lock service (0: any free port, found through rpcbind; -1: no NLM and NSM)")
	f.IntVar(&cfg.NSMPort, "nsm-port", 0, "TCP port of NSM v1, the status monitor receiving clients' reboot notifications (0: any free port)")
	f.DurationVar(&cfg.Locks.GracePeriod, "grace-period", lockd.DefaultGracePeriod, "after a restart, how long only the locks clients reclaim are granted (0: none)")
	f.StringVar(&cfg.Locks.StateDir, "nsm-state-dir", "", "directory of the NSM state number and the clients to notify after a restart (default: STATE-DIR/nsm when a state directory is used; otherwise in memory)")
	f.StringVar(&cfg.Locks.NodeCallbacks, "node-lock-socket", "", "unix socket of this node's lock callback service (driver mounter --lock-socket): with --rpcbind on a node that runs mounts, the GRANTED, GRANTED_MSG and SM_NOTIFY callbacks for the node's mounts, which reach this server because it holds NLM and NSM in the node's rpcbind, are relayed there (empty: off)")
	f.StringVar(&cfg.Locks.Name, "nsm-name", "", "the name this server gives in SM_NOTIFY, as clients know it (default: the address each notification leaves from)")
	f.Int64Var(&cfg.ReadMapBytes, "read-map-bytes", exportd.DefaultReadMapBytes, "bytes of files kept mapped to answer NFS READ from the page cache without a copy (4 MiB windows, least recently used unmapped first); 0: READ copies with pread")
	f.StringVar(&tlsCert, "tls-cert", "", "PEM file of the server's certificate: RPC-with-TLS (RFC 9289) is offered on NFS, MOUNT, NLM and NSM over TCP")
	f.StringVar(&tlsKey, "tls-key", "", "PEM file of the key of --tls-cert")
	f.StringVar(&tlsClientCA, "tls-client-ca", "", "PEM file of the authorities of the nodes' certificates: a client whose certificate verifies is known by its name (first DNS SAN, else CN), and is granted the volumes published to the node of that name")
	f.StringVar(&tlsRevoked, "tls-revoked", "", "file of revoked node certificates, refused at the TLS handshake: lines \"serial HEX\" or \"name NODE\", '#' comments; read again when it changes (needs --tls-client-ca)")
	f.StringVar(&tlsMode, "tls", "optional", "optional: TLS offered, nodes known by certificate or address; required: NFS, MOUNT and NLM over TCP only inside RPC-with-TLS with a node certificate (plaintext calls denied AUTH_TOOWEAK), volumes granted by certificate name only; needs --rdma-port 0")
	f.BoolVar(&cfg.RPCBind, "rpcbind", true, "register NFS, MOUNT, NLM and NSM with the rpcbind at 127.0.0.1:111 when one answers")
	_ = cmd.MarkFlagRequired("root")
	return cmd
}
