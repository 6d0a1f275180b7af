// Package plugin runs the CSI plugin processes of the driver: the
// controller (CSI Identity and Controller, the credit ledger) and the node
// plugin (CSI Identity and Node, the mount metrics of its pods, the
// device plugin, registration with kubelet), each with its Prometheus
// and health endpoints, until their context ends.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/credits"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/health"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/nodecert"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// ControllerConfig says how RunController runs.
type ControllerConfig struct {
	// Version is the driver's version (GetPluginInfo, the API user agent).
	Version string
	// Endpoint is the CSI endpoint, unix:///path or tcp://host:port.
	Endpoint string
	// AdminTokenFile holds the bearer token of the export servers' admin
	// API; "" means no admin API (third-party NFS servers only).
	AdminTokenFile string
	// Ports are the export servers' ports; Servers the servers known
	// from the start (ListVolumes, ListSnapshots, GetCapacity).
	Ports   csi.ServerPorts
	Servers []string
	// Kube locates the Kubernetes API of the credit ledger.
	Kube Kube
	// CreditLedger keeps each pod's RPC-over-RDMA credit grant in the
	// ledger ConfigMap, sharing CreditsBudget among an export server's
	// pods; LeaderElection runs it only while holding the Lease
	// nfsrdma-csi-credits in LeaderElectionNamespace (default
	// Kube.Namespace).
	CreditLedger, LeaderElection bool
	CreditsBudget                int
	LeaderElectionNamespace      string
	// MetricsAddress and HealthAddress are HOST:PORT of /metrics and
	// /healthz ("": off).
	MetricsAddress, HealthAddress string
	// NodeCerts approves and signs the nodes' RPC-with-TLS certificates
	// when its CASecret is set.
	NodeCerts NodeCerts
}

// NodeCerts configures the controller's signer of node certificates
// (nodecert.Controller).
type NodeCerts struct {
	// CASecret is the name of the Secret (in Kube.Namespace) holding the
	// CA, tls.crt and tls.key; made with a new CA when absent.
	CASecret string
	// NodeServiceAccount is the node plugin's ServiceAccount (in
	// Kube.Namespace): only its CSRs are approved.
	NodeServiceAccount string
	// Validity is the lifetime of a node certificate (0:
	// nodecert.DefaultValidity).
	Validity time.Duration
}

// RunController serves the CSI Identity and Controller services on
// cfg.Endpoint until ctx ends, with the credit ledger when there is a
// Kubernetes API. Errors: reading the token file, the endpoint's
// (csi.New, Driver.Run).
func RunController(ctx context.Context, cfg ControllerConfig) error {
	var token admin.TokenSource
	if cfg.AdminTokenFile != "" {
		// read again whenever the file changes: a rotated Secret is
		// followed without a restart
		f, err := admin.NewTokenFile(cfg.AdminTokenFile)
		if err != nil {
			return err
		}
		token = f
	}
	// every export server a PersistentVolume of ours names, for ListVolumes
	// after a restart and on a replica that made none of them
	var handles func() ([]string, error)
	if c, err := cfg.Kube.client(cfg.Version); err != nil {
		klog.InfoS("controller: no Kubernetes API: ListVolumes knows only the servers given with --server and those named in calls", "err", err)
	} else {
		handles = pvHandles(ctx, c, csi.DriverName)
	}
	cm := metrics.NewCSI(nil)
	d, err := csi.New(csi.Config{Version: cfg.Version, Endpoint: cfg.Endpoint, Controller: true,
		Ports: cfg.Ports, AdminToken: token, Servers: cfg.Servers, VolumeHandles: handles, Metrics: cm})
	if err != nil {
		return err
	}
	if cfg.CreditLedger {
		if c, err := cfg.Kube.client(cfg.Version); err != nil {
			klog.InfoS("controller: no Kubernetes API: the credit ledger is off", "err", err)
		} else {
			l := credits.New(credits.Config{Client: c, Namespace: cfg.Kube.Namespace, DriverName: csi.DriverName, Budget: cfg.CreditsBudget,
				Push: csi.CreditPusher(cfg.Ports, token)})
			if cfg.LeaderElection {
				ns := cfg.LeaderElectionNamespace
				if ns == "" {
					ns = cfg.Kube.Namespace
				}
				id, _ := os.Hostname()
				go l.RunElected(ctx, ns, "nfsrdma-csi-credits", id+"-"+strconv.Itoa(os.Getpid()))
			} else {
				go func() {
					if err := l.Run(ctx); err != nil {
						klog.ErrorS(err, "controller: credit ledger stopped")
					}
				}()
			}
		}
	}
	if nc := cfg.NodeCerts; nc.CASecret != "" {
		if err := runNodeCerts(ctx, cfg.Kube, cfg.Version, nc); err != nil {
			return err
		}
	}
	go serveMetrics(ctx, cfg.MetricsAddress, metrics.NewProcessRegistry(cm))
	go serveHealth(ctx, cfg.HealthAddress, cfg.Endpoint)
	return d.Run(ctx)
}

// serveMetrics serves reg's /metrics on addr until ctx ends ("" = off);
// a failure is logged, never fatal.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry) {
	if addr == "" {
		return
	}
	if err := metrics.Serve(ctx, addr, reg); err != nil {
		klog.ErrorS(err, "metrics: stopped", "address", addr)
	}
}

// serveHealth serves /healthz on addr for the plugin at the CSI endpoint
// until ctx ends ("" = off); a failure is logged, never fatal.
func serveHealth(ctx context.Context, addr, endpoint string) {
	if err := health.Serve(ctx, addr, endpoint, health.DefaultProbeTimeout); err != nil {
		klog.ErrorS(err, "health: stopped", "address", addr)
	}
}

// runNodeCerts makes the CA Secret when absent and starts the signer of
// node certificates. Errors: no API, no node ServiceAccount, the Secret's.
func runNodeCerts(ctx context.Context, k Kube, version string, nc NodeCerts) error {
	if nc.NodeServiceAccount == "" {
		return errors.New("controller: --node-ca-secret needs --node-service-account")
	}
	c, err := k.client(version)
	if err != nil {
		return fmt.Errorf("controller: --node-ca-secret needs the Kubernetes API: %w", err)
	}
	src := nodecert.SecretCA{Client: c, Namespace: k.Namespace, Name: nc.CASecret}
	if _, err := src.Ensure(ctx); err != nil {
		return err
	}
	s := &nodecert.Controller{Client: c, CA: src, Validity: nc.Validity,
		Approver: nodecert.Approver{Username: nodecert.ServiceAccountUser(k.Namespace, nc.NodeServiceAccount)}}
	go func() {
		if err := s.Run(ctx); err != nil {
			klog.ErrorS(err, "controller: node certificate signer stopped")
		}
	}()
	return nil
}
