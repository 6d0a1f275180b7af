package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/nfsrdma/nfsrdma-csi/pkg/demo"
)

func newDemoCmd() *cobra.Command {
	var (
		o    demo.Options
		size string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole product on this machine: a volume through the CSI API, two pods' FUSE mounts, real data verified",
		Long: `Start the export server, the mounter and the CSI controller and node plugins
in this process (on loopback ports and unix sockets in a fresh directory), then
do what Kubernetes would do, through the real CSI gRPC API: CreateVolume with a
quota, ControllerPublishVolume to this node, NodePublishVolume for two pods
(each its own FUSE mount, NFS connection and RPC-over-RDMA credit share); write
--size bytes of random data in --files files through pod A's mount and verify
every file's SHA-256 through pod B's; show the volume's stats; take a snapshot,
restore it as a clone and verify a file there; expand the volume; then
unpublish and delete everything and check that nothing is left.

NFS goes over RPC-over-RDMA (software iWARP when there is no RDMA NIC) or, with
--transport tcp, over TCP. Each step prints its time, and bytes and MiB/s for
the data steps. Needs root and /dev/fuse. Ctrl-C tears everything down and
exits non-zero; with --keep the mounts stay up after the data steps until
Ctrl-C, so that the files can be looked at.`,
		Example: `  sudo go run ./cmd/driver demo
  sudo driver demo --size 256MiB --transport tcp
  sudo driver demo --keep --dir /tmp/demo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := demo.ParseSize(size)
			if err != nil {
				return err
			}
			// zero would mean "the default" to demo.Options: here it is
			// a mistake
			if n == 0 || o.Files == 0 || o.CreditsPerPod == 0 {
				return fmt.Errorf("%w: --size, --files and --credits must not be 0", demo.ErrUsage)
			}
			o.Size = n
			if err := o.Validate(); err != nil {
				return err
			}
			o.Out = cmd.OutOrStdout()
			o.Progress = o.Out == os.Stdout && term.IsTerminal(int(os.Stdout.Fd()))
			// the services' logs go to DIR/demo.log, unless asked for on
			// standard error
			o.LogToFile = !cmd.Flags().Changed("logtostderr") && !cmd.Flags().Changed("v")
			return demo.Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Transport, "transport", demo.DefaultTransport, "transport of the pods' NFS mounts: rdma (RPC-over-RDMA, software iWARP without an RDMA NIC) or tcp")
	f.StringVar(&size, "size", "1GiB", "bytes written through pod A and verified through pod B (e.g. 64MiB, 1GiB)")
	f.IntVar(&o.Files, "files", demo.DefaultFiles, "number of files the data is split into")
	f.BoolVar(&o.Keep, "keep", false, "leave the mounts up after the data steps until Ctrl-C, and keep the directory")
	f.StringVar(&o.Dir, "dir", "", "directory for the export, state, sockets, logs and mount points (default: a new temporary directory, removed at the end)")
	f.IntVar(&o.CreditsPerPod, "credits", 16, "RPC-over-RDMA credits each pod's mount asks for (StorageClass parameter creditsPerPod)")
	return cmd
}
