package csi

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/credits"
)

// StorageClass parameters (CreateVolumeRequest.parameters).
const (
	ParamServer           = credits.KeyServer        // export server host name or IP (required)
	ParamShare            = "share"                  // exported directory volumes are made in (default "/")
	ParamSubDir           = "subDir"                 // volume directory under share; templates below (default: the volume name)
	ParamOnDelete         = "onDelete"               // delete | retain | archive (default delete)
	ParamMountPermissions = "mountPermissions"       // octal mode of the volume directory (default 0777)
	ParamTransport        = "transport"              // rdma | tcp (default rdma)
	ParamCreditsPerPod    = credits.KeyCreditsPerPod // RPC-over-RDMA credits each pod's mount asks for (default 16)

	// Keys the external-provisioner adds with --extra-create-metadata.
	paramPVCName      = "csi.storage.k8s.io/pvc/name"
	paramPVCNamespace = "csi.storage.k8s.io/pvc/namespace"
	paramPVName       = "csi.storage.k8s.io/pv/name"

	onDeleteDelete  = "delete"
	onDeleteRetain  = "retain"
	onDeleteArchive = "archive"

	// DefaultCreditsPerPod is the credits a pod's mount asks for when the
	// StorageClass says nothing (the export server may grant fewer).
	DefaultCreditsPerPod = credits.DefaultDesired
	// MaxCreditsPerPod bounds creditsPerPod (RFC 8166 credits are a
	// 32-bit field; Linux caps its requester at 128 slots by default).
	MaxCreditsPerPod = 1024
)

// Volume context keys (CreateVolumeResponse.volume.volume_context, handed
// to NodePublishVolume).
const (
	ctxServer       = credits.KeyServer
	ctxExport       = "export"    // the path the node mounts, e.g. "/pvc-1"
	ctxTransport    = "transport" // rdma | tcp
	ctxCredits      = credits.KeyCreditsPerPod
	ctxMountOptions = "mountOptions" // driver mount -o options from the controller (ports)
	ctxEphemeral    = "csi.storage.k8s.io/ephemeral"
	ctxPodName      = "csi.storage.k8s.io/pod.name"
	ctxPodNamespace = "csi.storage.k8s.io/pod.namespace"
	ctxPodUID       = "csi.storage.k8s.io/pod.uid"
	ctxServiceAcct  = "csi.storage.k8s.io/serviceAccount.name"
)

// volumeParams are the parsed StorageClass parameters.
type volumeParams struct {
	Server        string
	Share         string
	SubDir        string
	OnDelete      string
	Mode          uint32
	Transport     string
	CreditsPerPod int
}

// parseParams validates the StorageClass parameters of volume name; an
// unknown parameter or a bad value is an error (InvalidArgument).
func parseParams(name string, p map[string]string) (volumeParams, error) {
	v := volumeParams{Share: "/", OnDelete: onDeleteDelete, Mode: 0o777, Transport: "rdma", CreditsPerPod: DefaultCreditsPerPod}
	subDir := ""
	for k, val := range p {
		switch k {
		case ParamServer:
			v.Server = val
		case ParamShare:
			v.Share = val
		case ParamSubDir:
			subDir = val
		case ParamOnDelete:
			v.OnDelete = strings.ToLower(val)
		case ParamMountPermissions:
			m, err := strconv.ParseUint(val, 8, 32)
			if err != nil || m > 0o7777 {
				return v, fmt.Errorf("parameter %s=%q: want an octal mode such as 0777", k, val)
			}
			v.Mode = uint32(m)
		case ParamTransport:
			v.Transport = strings.ToLower(val)
		case ParamCreditsPerPod:
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > MaxCreditsPerPod {
				return v, fmt.Errorf("parameter %s=%q: want an integer in [1, %d]", k, val, MaxCreditsPerPod)
			}
			v.CreditsPerPod = n
		case paramPVCName, paramPVCNamespace, paramPVName:
		default:
			return v, fmt.Errorf("unknown parameter %q (known: server, share, subDir, onDelete, mountPermissions, transport, creditsPerPod)", k)
		}
	}
	if v.Server == "" {
		return v, fmt.Errorf("parameter %s is required", ParamServer)
	}
	if strings.ContainsAny(v.Server, idSep+"/ ") {
		return v, fmt.Errorf("parameter %s=%q: not a host name or address", ParamServer, v.Server)
	}
	v.Server = strings.TrimSuffix(strings.TrimPrefix(v.Server, "["), "]")
	if !path.IsAbs(v.Share) || strings.Contains(v.Share, idSep) || path.Clean(v.Share) != v.Share {
		return v, fmt.Errorf("parameter %s=%q: want a clean absolute path", ParamShare, v.Share)
	}
	switch v.OnDelete {
	case onDeleteDelete, onDeleteRetain, onDeleteArchive:
	default:
		return v, fmt.Errorf("parameter %s=%q: want delete, retain or archive", ParamOnDelete, v.OnDelete)
	}
	switch v.Transport {
	case "rdma", "tcp":
	default:
		return v, fmt.Errorf("parameter %s=%q: want rdma or tcp", ParamTransport, v.Transport)
	}
	if subDir == "" {
		v.SubDir = name
	} else {
		v.SubDir = expandSubDir(subDir, name, p)
	}
	if !cleanRel(v.SubDir) || strings.Contains(v.SubDir, idSep) || len(v.SubDir) > 255 {
		return v, fmt.Errorf("subdirectory %q: want a clean relative path below the share without '#'", v.SubDir)
	}
	return v, nil
}

// expandSubDir replaces the templates csi-driver-nfs supports:
// ${pvc.metadata.name}, ${pvc.metadata.namespace}, ${pv.metadata.name}
// (the last defaults to the volume name when the provisioner passes none).
func expandSubDir(s, name string, p map[string]string) string {
	pv := p[paramPVName]
	if pv == "" {
		pv = name
	}
	return strings.NewReplacer(
		"${pvc.metadata.name}", p[paramPVCName],
		"${pvc.metadata.namespace}", p[paramPVCNamespace],
		"${pv.metadata.name}", pv,
	).Replace(s)
}
