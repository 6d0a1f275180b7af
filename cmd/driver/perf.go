package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nfsrdma/nfsrdma-csi/pkg/perftest"
)

func newPerfCmd() *cobra.Command {
	perf := &cobra.Command{
		Use:   "perf",
		Short: "Measure the RDMA transport, perftest style (ib_write_bw, ib_read_bw, ib_send_bw, ib_send_lat)",
		Long: `Measure the RDMA transport (software iWARP) the way the perftest suite measures
an RDMA NIC: bandwidth in MiB/s and messages/s, latency percentiles in µs
(one-way: half the round trip). With --baseline, the same byte movement over a
raw TCP loopback socket is measured in the same run and reported as a ratio.

Tests:
  write_bw   RDMA Write of --size bytes into the server's buffer, --depth outstanding
  read_bw    RDMA Read of --size bytes from the server's buffer, --depth outstanding
  send_bw    Send of --size bytes into receives the server posted, --depth outstanding
  send_lat   Send ping-pong of --size bytes (64 by default)`,
		Args: cobra.NoArgs,
		RunE: helpOnly,
	}
	perf.AddCommand(newPerfServerCmd(), newPerfClientCmd(), newPerfLoopbackCmd())
	return perf
}

func newPerfServerCmd() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Serve perf clients until interrupted",
		Example: `  driver perf server --listen 127.0.0.1:18515
  driver perf client --server 127.0.0.1:18515 --test write_bw`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			srv, err := perftest.Listen(cmd.Context(), listen)
			if err != nil {
				return err
			}
			defer srv.Close()
			cmd.PrintErrf("perf server listening on %s\n", srv.Addr())
			return srv.Serve(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:18515", "TCP address to listen on (host:port)")
	return cmd
}

// runFlags are the flags of a run (client and loopback).
type runFlags struct {
	opts perftest.Options
	json bool
}

func (f *runFlags) register(fs *pflag.FlagSet, baseline bool) {
	f.opts.Test = perftest.WriteBW
	fs.Var(&f.opts.Test, "test", "test to run: write_bw, read_bw, send_bw or send_lat")
	fs.Var(&f.opts.Size, "size", "message size: bytes or with a unit (64, 4KiB, 1MiB); default 1MiB, 64 for send_lat")
	fs.IntVar(&f.opts.Iters, "iters", perftest.DefaultIters, "messages to move (round trips for send_lat)")
	fs.IntVar(&f.opts.Depth, "depth", perftest.DefaultDepth, "work requests kept outstanding (bandwidth tests)")
	fs.BoolVar(&f.opts.NoCRC, "no-crc", false, "turn MPA CRC32c off")
	fs.BoolVar(&f.opts.FPDUPathMSS, "fpdu-mss", false, "size the client's FPDUs by the path MSS as Linux siw does (default: 64768-byte ULPDUs, both ends being this stack)")
	fs.BoolVar(&f.opts.Verify, "verify", false, "fill the source with a pattern and check the sink")
	fs.BoolVar(&f.opts.Baseline, "baseline", baseline, "also measure a raw TCP loopback socket and report RDMA/TCP ratios")
	fs.DurationVar(&f.opts.Timeout, "timeout", 0, "bound on the whole run (0: none)")
	fs.BoolVar(&f.json, "json", false, "print the report as JSON instead of a table")
}

func (f *runFlags) print(cmd *cobra.Command, rep *perftest.Report) error {
	if f.json {
		return rep.WriteJSON(cmd.OutOrStdout())
	}
	return rep.WriteTable(cmd.OutOrStdout())
}

func newPerfClientCmd() *cobra.Command {
	var (
		f      runFlags
		server string
	)
	cmd := &cobra.Command{
		Use:   "client",
		Short: "Run a test against a perf server",
		Example: `  driver perf client --server 127.0.0.1:18515 --test write_bw --size 1MiB --iters 1000 --depth 16
  driver perf client --server 127.0.0.1:18515 --test send_lat --iters 10000 --baseline --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := perftest.RunClient(cmd.Context(), server, f.opts)
			if err != nil {
				return err
			}
			return f.print(cmd, rep)
		},
	}
	cmd.Flags().StringVar(&server, "server", "127.0.0.1:18515", "perf server address (host:port)")
	f.register(cmd.Flags(), false)
	return cmd
}

func newPerfLoopbackCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "loopback",
		Short: "Run server and client of a test in this process over 127.0.0.1",
		Example: `  driver perf loopback --test write_bw --size 1MiB --iters 1000
  driver perf loopback --test send_lat --verify --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := perftest.RunLoopback(cmd.Context(), f.opts)
			if err != nil {
				return err
			}
			return f.print(cmd, rep)
		},
	}
	f.register(cmd.Flags(), true)
	return cmd
}
