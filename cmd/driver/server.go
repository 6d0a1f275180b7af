package main

import (
	"context"
	"net"
	"os"
	"strconv"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

func newServerCmd() *cobra.Command {
	var (
		root                      string
		exports                   []string
		listen, keyFile           string
		nfsPort, mntPort, rdmaPrt int
		credits                   int
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
software iWARP provider (0 turns it off), granting --credits per connection.`,
		Example: `  driver server --root /srv/nfs --export /vol1:10.0.0.0/8:rw --export /vol2:127.0.0.1:ro
  mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=20048 127.0.0.1:/vol1 /mnt`,
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
			opts := nfsserver.Options{Root: root, Exports: exps}
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
			defer cancel()
			errc := make(chan error, 2)
			go func() { errc <- srv.ListenAndServe(ctx, listen, nfsPort, mntPort) }()
			n := 1
			if rdmaPrt > 0 {
				n++
				go func() {
					addr := net.JoinHostPort(listen, strconv.Itoa(rdmaPrt))
					errc <- srv.ServeRDMA(ctx, siw.NewDevice(siw.Config{}), addr, rpcrdma.ServerOptions{Credits: credits})
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
	f.IntVar(&credits, "credits", 32, "RPC-over-RDMA credits granted per connection (receives posted per connection)")
	_ = cmd.MarkFlagRequired("root")
	return cmd
}
