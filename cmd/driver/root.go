package main

import (
	"flag"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// newRootCmd builds the command tree: klog's flags (--v, --logtostderr,
// --log_dir ...) are persistent flags of the root, as Kubernetes components
// register them, and every command has --help.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:          "driver",
		Short:        "nfsrdma-csi: NFS over RDMA for Kubernetes pods, with a user-space NFS client",
		SilenceUsage: true,         // a failed run is not a usage error
		Args:         cobra.NoArgs, // an unknown subcommand is an error
		RunE:         helpOnly,
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	root.PersistentFlags().AddGoFlagSet(klogFlags)
	root.SetGlobalNormalizationFunc(wordSepNormalize)
	root.CompletionOptions.HiddenDefaultCmd = true
	root.AddCommand(newVersionCmd(), newPerfCmd(), newServerCmd(), newMountCmd(),
		newControllerCmd(), newNodeCmd(), newMounterCmd(), newDemoCmd())
	return root
}

// helpOnly is the action of a command that only groups subcommands.
func helpOnly(cmd *cobra.Command, _ []string) error { return cmd.Help() }

// wordSepNormalize accepts --log-dir for --log_dir, as Kubernetes
// components do.
func wordSepNormalize(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
}
