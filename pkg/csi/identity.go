package csi

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// identity is the CSI Identity service.
type identity struct {
	csipb.UnimplementedIdentityServer
	d *Driver
}

func (i *identity) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: i.d.cfg.Name, VendorVersion: i.d.cfg.Version}, nil
}

func (i *identity) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	caps := []*csipb.PluginCapability{{
		Type: &csipb.PluginCapability_VolumeExpansion_{VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{
			Type: csipb.PluginCapability_VolumeExpansion_ONLINE}},
	}}
	// The plugin (controller and node together) has a controller service,
	// whichever part answers: COs and csi-sanity ask the node's endpoint
	// too, as csi-driver-nfs and the hostpath driver answer.
	caps = append(caps, &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{
		Type: csipb.PluginCapability_Service_CONTROLLER_SERVICE}}})
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe reports readiness: the node plugin is ready when its mounter
// answers (always, with a keeper: node.probe); the controller when every export server it knows answers (its
// admin API, or NFS NULL for a third-party server).
func (i *identity) Probe(ctx context.Context, _ *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	ready := true
	if i.d.node != nil {
		if err := i.d.node.probe(ctx); err != nil {
			ready = false
		}
	}
	if i.d.ctrl != nil {
		if err := i.d.ctrl.probe(ctx); err != nil {
			ready = false
		}
	}
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(ready)}, nil
}
