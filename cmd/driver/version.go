package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// version is the driver's version, set at build time:
//
//	go build -ldflags "-X main.version=v0.1.0" ./cmd/driver
var version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the driver's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version)
			return err
		},
	}
}
