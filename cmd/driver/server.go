package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockd"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

func newServerCmd() *cobra.Command {
	var (
		root, metricsAddr         string
		exports                   []string
		listen, keyFile           string
		nfsPort, mntPort, rdmaPrt int
		credits, defCredits       int
		creditsBudget             int
		rdmaVersion               int
		rdmaReadChunks            bool
		adminListen, adminTokenF  string
		stateDir, snapshotDir     string
		nlmPort, nsmPort          int
		gracePeriod               time.Duration
		nsmStateDir, nsmName      string
		useRPCBind                bool
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the NFSv3 export server (NFS over RDMA and TCP, MOUNT v3 over TCP) on a local directory",
		Long: `Serve a local directory over NFS version 3 (RFC 1813), with MOUNT v3 on its
own port, until SIGINT or SIGTERM. Each --export names a directory under --root
as clients mount it ("/" is the root itself), optionally with the clients
allowed (addresses or CIDRs, comma-separated; default every client) and
options (ro, rw, root_squash, no_root_squash; default rw,no_root_squash).
Without --export, the root is exported read-write to every client.
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
is kept in --state-dir and survives restarts. Bind the admin API to an address
the pod network cannot reach, and restrict the root export (--export /:CIDR) to
the controller: handles obtained through it bypass volume quotas and lists.`,
		Example: `  driver server --root /srv/nfs --export /vol1:10.0.0.0/8:rw --export /vol2:127.0.0.1:ro
  mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=20048 127.0.0.1:/vol1 /mnt
  driver server --root /srv/nfs --export /:10.0.0.5 --admin-listen 10.0.0.1:20050 --admin-token-file /etc/nfsrdma/admin-token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var exps []nfsserver.Export
			for _, s := range exports {
				e, err := nfsserver.ParseExport(s)
				if err != nil {
					return err
				}
				exps = append(exps, e)
			}
			if len(exps) == 0 {
				exps = []nfsserver.Export{{Path: "/"}}
			}
			var token string
			if adminListen != "" {
				if adminTokenF == "" {
					return errors.New("--admin-listen needs --admin-token-file: the admin API is never served without a token")
				}
				b, err := os.ReadFile(adminTokenF)
				if err != nil {
					return fmt.Errorf("admin token: %w", err)
				}
				if token = strings.TrimSpace(string(b)); token == "" {
					return fmt.Errorf("admin token file %s is empty", adminTokenF)
				}
			}
			if adminListen == "" && !cmd.Flags().Changed("state-dir") {
				// no admin API and no explicit --state-dir: use the default
				// state directory only if a registry is there to restore
				if _, err := os.Stat(filepath.Join(stateDir, nfsserver.StateFileName)); err != nil {
					stateDir = ""
				}
			}
			if adminListen != "" {
				for _, e := range exps {
					if e.Path == "/" && len(e.Clients) == 0 {
						klog.InfoS("nfs server: warning: the root is exported to every client; handles obtained through it bypass volume quotas and client lists (restrict it: --export /:CONTROLLER-ADDRESS)")
					}
				}
			}
			if !cmd.Flags().Changed("nsm-state-dir") && stateDir != "" {
				nsmStateDir = filepath.Join(stateDir, "nsm")
			}
			if gracePeriod < 0 {
				return fmt.Errorf("--grace-period %v: must not be negative", gracePeriod)
			}
			opts := nfsserver.Options{Root: root, Exports: exps, StateDir: stateDir, SnapshotDir: snapshotDir, Version: version,
				Locks: lockd.Options{StateDir: nsmStateDir, GracePeriod: gracePeriod, Name: nsmName}}
			if keyFile != "" {
				key, err := os.ReadFile(keyFile)
				if err != nil {
					return err
				}
				opts.HandleKey = key
			}
			srv, err := nfsserver.New(opts)
			if err != nil {
				return err
			}
			defer srv.Close()
			ctx, cancel := context.WithCancel(cmd.Context())
			if metricsAddr != "" {
				rpcm := metrics.NewRPCServer(nil)
				srv.Dispatcher().SetObserver(rpcm)
				reg := newRegistry(rpcm, metrics.NewVolumeCollector(srv.Volumes, nil),
					metrics.NewTransportCollector(metrics.RoleResponder, srv.RDMAMetrics, nil),
					metrics.NewConnectionCollector(srv.RDMAConnections), metrics.NewDRCCollector(srv.DRCStats))
				go serveMetrics(ctx, metricsAddr, reg)
			}
			defer cancel()
			errc := make(chan error, 4)
			go func() { errc <- srv.ListenAndServe(ctx, listen, nfsPort, mntPort) }()
			n := 1
			if nlmPort >= 0 {
				nlmL, err := net.Listen("tcp", net.JoinHostPort(listen, strconv.Itoa(nlmPort)))
				if err != nil {
					return fmt.Errorf("nlm: %w", err)
				}
				nsmL, err := net.Listen("tcp", net.JoinHostPort(listen, strconv.Itoa(nsmPort)))
				if err != nil {
					nlmL.Close()
					return fmt.Errorf("nsm: %w", err)
				}
				klog.InfoS("nfs server: serving locks", "nlm", nlmL.Addr(), "nsm", nsmL.Addr(), "nsmState", srv.Locks().State(), "grace", srv.Locks().GraceRemaining(), "nsmStateDir", nsmStateDir)
				n++
				go func() { errc <- srv.ServeLocks(ctx, nlmL, nsmL) }()
				if useRPCBind {
					unregister := registerRPCBind(cmd.Context(), nfsPort, mntPort, portOfListener(nlmL), portOfListener(nsmL))
					defer unregister()
				}
			}
			if adminListen != "" {
				h, err := srv.AdminHandler(token)
				if err != nil {
					return err
				}
				l, err := net.Listen("tcp", adminListen)
				if err != nil {
					return fmt.Errorf("admin API: %w", err)
				}
				hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
				n++
				shut := make(chan struct{})
				go func() {
					klog.InfoS("nfs server: serving the admin API", "addr", l.Addr(), "stateDir", stateDir)
					err := hs.Serve(l)
					if errors.Is(err, http.ErrServerClosed) {
						<-shut // requests in progress have ended
						err = nil
					}
					errc <- err
				}()
				go func() {
					defer close(shut)
					<-ctx.Done()
					sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer scancel()
					hs.Shutdown(sctx)
				}()
			}
			if rdmaPrt > 0 {
				n++
				go func() {
					addr := net.JoinHostPort(listen, strconv.Itoa(rdmaPrt))
					errc <- srv.ServeRDMA(ctx, siw.NewDevice(siw.Config{}), addr, rpcrdma.ServerOptions{Credits: credits, Grant: defCredits, Budget: creditsBudget, MaxVersion: rdmaVersion, NoResponderReadChunks: !rdmaReadChunks})
				}()
			}
			var first error
			for range n {
				if err := <-errc; err != nil && first == nil {
					first = err
					cancel() // one transport failed: stop the other
				}
			}
			klog.InfoS("nfs server: stopped", "err", first)
			return first
		},
	}
	f := cmd.Flags()
	f.StringVar(&root, "root", "", "local directory to serve (required)")
	f.StringArrayVar(&exports, "export", nil, "export PATH[:CIDR[,CIDR]][:ro|rw[,root_squash]] (repeatable)")
	f.StringVar(&keyFile, "handle-key-file", "", "file holding the secret that authenticates file handles (default: derived from the root directory)")
	f.StringVar(&listen, "listen", "127.0.0.1", "address to listen on")
	f.IntVar(&nfsPort, "nfs-port", nfsserver.DefaultNFSPort, "TCP port of NFS v3")
	f.IntVar(&mntPort, "mount-port", nfsserver.DefaultMountPort, "TCP port of MOUNT v3")
	f.IntVar(&rdmaPrt, "rdma-port", nfsserver.DefaultRDMAPort, "port of NFS over RDMA (software iWARP); 0: off")
	f.StringVar(&metricsAddr, "metrics-address", "", "HOST:PORT of the Prometheus /metrics endpoint: RPCs by procedure with latency, RPC-over-RDMA transport counters, volume quota and usage (empty: off)")
	f.IntVar(&credits, "credits", 32, "RPC-over-RDMA receive buffers per connection: the most credits a connection can be granted")
	f.IntVar(&defCredits, "default-credits", 0, "RPC-over-RDMA credits granted to a connection whose AUTH_SYS machine has no grant from the admin API (0: --credits)")
	f.IntVar(&creditsBudget, "credits-budget", 0, "RPC-over-RDMA receives posted over all connections, shared max-min fair (0: no bound)")
	f.IntVar(&rdmaVersion, "rdma-version", 2, "highest RPC-over-RDMA version served: 2 (version 1 or 2, as each client opens) or 1 (version 1 only)")
	f.BoolVar(&rdmaReadChunks, "rdma-read-chunks", true, "RPC-over-RDMA version 2: return a reply too large for the client's reply buffers in a Read chunk the client pulls (responder-provided Read chunks), with clients that announce them")
	f.StringVar(&adminListen, "admin-listen", "", "HOST:PORT of the admin API (HTTP, bearer token); empty: off")
	f.StringVar(&adminTokenF, "admin-token-file", "", "file holding the admin API's bearer token (required with --admin-listen)")
	f.StringVar(&stateDir, "state-dir", "/var/lib/nfsrdma-server", "directory of the volume registry (volumes, quotas, client lists, snapshots); empty: in memory only. Without --admin-listen, the default is used only if it holds a registry")
	f.StringVar(&snapshotDir, "snapshot-dir", "", "directory of the snapshots, not beneath --root (default: STATE-DIR/snapshots)")
	f.IntVar(&nlmPort, "nlm-port", 0, "TCP port of NLM v4, the lock service (0: any free port, found through rpcbind; -1: no NLM and NSM)")
	f.IntVar(&nsmPort, "nsm-port", 0, "TCP port of NSM v1, the status monitor receiving clients' reboot notifications (0: any free port)")
	f.DurationVar(&gracePeriod, "grace-period", lockd.DefaultGracePeriod, "after a restart, how long only the locks clients reclaim are granted (0: none)")
	f.StringVar(&nsmStateDir, "nsm-state-dir", "", "directory of the NSM state number and the clients to notify after a restart (default: STATE-DIR/nsm when a state directory is used; otherwise in memory)")
	f.StringVar(&nsmName, "nsm-name", "", "the name this server gives in SM_NOTIFY, as clients know it (default: the address each notification leaves from)")
	f.BoolVar(&useRPCBind, "rpcbind", true, "register NFS, MOUNT, NLM and NSM with the rpcbind at 127.0.0.1:111 when one answers")
	_ = cmd.MarkFlagRequired("root")
	return cmd
}

func portOfListener(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }

// registerRPCBind registers the server's programs over TCP with the local
// rpcbind if one answers, and returns what undoes it. Ports 0 (unknown)
// are not registered.
func registerRPCBind(ctx context.Context, nfsPort, mntPort, nlmPort, nsmPort int) func() {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sunrpc.PortmapPort))
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		klog.V(1).InfoS("nfs server: no local rpcbind; not registering", "addr", addr, "err", err)
		return func() {}
	}
	c.Close()
	var maps []sunrpc.Mapping
	for _, p := range []struct {
		prog, vers uint32
		port       int
	}{
		{nfs3.Program, nfs3.Version, nfsPort},
		{mount3.Program, mount3.Version, mntPort},
		{nlm.Program, nlm.Version, nlmPort},
		{nsm.Program, nsm.Version, nsmPort},
	} {
		if p.port > 0 {
			maps = append(maps, sunrpc.Mapping{Prog: p.prog, Vers: p.vers, Prot: sunrpc.IPProtoTCP, Port: uint32(p.port)})
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	unregister, err := nfsserver.RegisterRPCBind(rctx, addr, maps)
	if err != nil {
		klog.InfoS("nfs server: rpcbind registration incomplete", "err", err)
	} else {
		klog.InfoS("nfs server: registered with rpcbind", "addr", addr, "programs", len(maps))
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		unregister(uctx)
	}
}
