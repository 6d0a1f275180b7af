package main

import (
	"github.com/spf13/cobra"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/fusemount"
)

func newMountCmd() *cobra.Command {
	var cfg fusemount.Config
	cmd := &cobra.Command{
		Use:   "mount [-o OPTIONS] SERVER:/EXPORT MOUNTPOINT",
		Short: "Mount an NFSv3 export through FUSE with the user-space NFS client (foreground)",
		Long: `Mount SERVER:/EXPORT on MOUNTPOINT through FUSE, with the user-space NFSv3
client over RPC-over-RDMA (software iWARP) or TCP, and serve it in the
foreground until SIGINT or SIGTERM (then unmount) or until the mount point is
unmounted from outside (umount MOUNTPOINT, fusermount3 -u MOUNTPOINT).
Needs root (mount(2) of /dev/fuse).

Options (-o, comma-separated, nfs(5) vocabulary; unknown options are errors):
  proto=rdma|tcp       transport of NFS (MOUNT always uses TCP) [tcp]
  port=N               NFS port [rdma: 20049, tcp: ask rpcbind]
  mountport=N          MOUNT v3 port over TCP [ask rpcbind]
  vers=3               NFS version; only 3
  rsize=N, wsize=N     READ/WRITE size caps in bytes [server's, at most 1 MiB]
  hard | soft          retry forever, or fail with EIO after retrans [hard]
  timeo=N              RPC timeout in deciseconds [600]
  retrans=N            retransmissions of a soft mount [2]
  ac | noac            attribute caching; noac also makes writes synchronous [ac]
  acregmin=N acregmax=N acdirmin=N acdirmax=N actimeo=N
                       attribute cache timeouts in seconds [3, 60, 30, 60]
  ro | rw              read-only or read-write [rw]
  credits=N            RPC-over-RDMA credits to ask for (proto=rdma) [32]
  rdmadev=auto|siw|ibverbs|NAME
                       verbs provider of proto=rdma: a kernel RDMA device that
                       reaches the server (ibverbs builds), else software iWARP [auto]
  mpacrc | nompacrc    software iWARP: ask for the MPA CRC32c, or not; it is used
                       when either end asks (Linux siw does not ask) [mpacrc]
  read_ahead_kb=N      the mount's kernel read-ahead in KiB, 0 = the kernel's
                       128 KiB (/sys/class/bdi/*/read_ahead_kb; needs root) [4096]
  lock | nolock        fcntl and flock locks on the server with NLM v4 over TCP,
                       coherent across mounts and hosts; or local to this mount
                       (nolock = local_lock=all) [lock]
  local_lock=none|all|flock|posix
                       which locks stay local to this mount [none]
  lockport=N           the server's NLM port over TCP [ask rpcbind]
  xprtsec=none|tls|mtls
                       RPC-with-TLS (RFC 9289) on NFS over TCP, MOUNT and NLM: tls
                       verifies the server's certificate (--tls-ca), mtls also
                       presents this node's (--tls-cert, --tls-key); never falls
                       back to plaintext. With proto=rdma the NFS/RDMA connection
                       itself is not covered (TLS is defined for TCP only) [none]

Locks: a process blocked in F_SETLKW or flock(2) waits for the server's NLM
GRANTED callback, served on a TCP port of this process registered with the
local rpcbind (127.0.0.1:111) when possible, or with --node-lock-socket by the
node's callback service (driver mounter), and re-sends its LOCK every second
in case the callback cannot reach it; a signal cancels the wait
(EINTR). After the server restarts (SM_NOTIFY, or its grace period), held
locks are reclaimed. With --state-dir, the node's NSM state is kept there and
servers are told of a reboot of the node so that they free its old locks.

Handover: with --handover-socket, a newer binary started with --takeover on
that socket takes the mount over: this process stops taking requests,
finishes those in flight (blocked locks, and lock calls waiting out the
server's grace period, apart), writes its data back to the
server, passes its /dev/fuse descriptor and its state (the kernel's nodes,
open files, NLM lock owners and locks) and exits; the successor serves the
same kernel connection, and the kernel sends it again what this process
had read and not answered (Linux 6.9 or later). Locks stay held by the same
owners on the server. Not over io_uring (fuse_uring=off for such mounts).`,
		Example: `  driver mount -o proto=rdma,port=20049,mountport=20048 10.0.0.5:/vol1 /mnt/vol1
  driver mount -o proto=tcp,port=2049,mountport=20048,actimeo=0 127.0.0.1:/ /mnt`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Source, cfg.Dir, cfg.Version = args[0], args[1], version
			return fusemount.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&cfg.Options, "options", "o", "", "mount options, comma-separated (see above)")
	f.BoolVar(&cfg.Debug, "fuse-debug", false, "log every FUSE request")
	f.IntVar(&cfg.FD, "fuse-fd", 0, "serve an inherited /dev/fuse fd that another process already mounted on MOUNTPOINT (mount(2) with fd=N) instead of mounting")
	f.IntVar(&cfg.ReadyFD, "ready-fd", 0, "inherited fd to write one line to once mounted (\"ok\" or \"error: ...\"), then close")
	f.StringVar(&cfg.MetricsSocket, "metrics-socket", "", "unix socket to serve this mount's Prometheus metrics on (the node plugin gathers them)")
	f.StringVar(&cfg.MachineName, "machine-name", "", "AUTH_SYS machine name of NFS calls (default: the host name); the CSI node plugin sets the pod's identity")
	f.StringVar(&cfg.LockCallerName, "lock-caller-name", "", "caller_name of NLM locks, the name servers know this node by (default: the host name); the CSI node plugin sets the node's name")
	f.StringVar(&cfg.NodeLockSocket, "node-lock-socket", "", "unix socket of the node's lock callback service (driver mounter --lock-socket) to take NLM/NSM callbacks from, instead of serving them in this process (the mounter sets it)")
	f.StringVar(&cfg.TLS.CA, "tls-ca", "", "PEM file of the authorities the server's certificate must chain to, with xprtsec=tls or mtls (default: the system's roots)")
	f.StringVar(&cfg.TLS.Cert, "tls-cert", "", "PEM file of this node's certificate, presented with xprtsec=mtls (the export server grants volumes to the node it names)")
	f.StringVar(&cfg.TLS.Key, "tls-key", "", "PEM file of the key of --tls-cert")
	f.StringVar(&cfg.StateDir, "state-dir", "", "directory of the node's NSM state (reboot counter, servers to notify after a reboot), shared by the node's mounts; none: kept in memory")
	f.StringVar(&cfg.HandoverSocket, "handover-socket", "", "unix socket to listen on for a successor (driver mount --takeover SOCKET): it is handed this mount's FUSE connection and state, then this process exits without unmounting")
	f.StringVar(&cfg.Takeover, "takeover", "", "take MOUNTPOINT over from the driver mount process listening on this --handover-socket, instead of mounting: applications see a pause, not an error")
	f.StringVar(&cfg.MapFile, "map-file", "", "file to keep this mount's map of the kernel's nodeids and open handles in (outside the process: the mounter's state directory), for --recover after a crash")
	f.BoolVar(&cfg.Recover, "recover", false, "take up the connection of --fuse-fd after the mount process serving it died, from its --map-file, instead of answering INIT")
	return cmd
}
