package csi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"
)

// Volume and snapshot IDs carry everything DeleteVolume and DeleteSnapshot
// need, so the controller keeps no state of its own (as csi-driver-nfs's
// "server#share#subdir#..." IDs). Fields are separated by '#', which
// therefore may not appear in a server name or a path.
//
//	volume:   "1#SERVER#SHARE#SUBDIR#ONDELETE"   e.g. 1#10.0.0.5#/#pvc-3f2a#delete
//	snapshot: "s1#SERVER#ID"                     e.g. s1#10.0.0.5#snap-0f3c...
const (
	volumeIDVersion   = "1"
	snapshotIDVersion = "s1"
	idSep             = "#"
)

// errBadID: a volume or snapshot ID that is not one of ours.
var errBadID = errors.New("not an nfsrdma id")

// volumeID names one volume: the directory Share/SubDir on Server.
type volumeID struct {
	Server   string // host name or IP address (IPv6 without brackets)
	Share    string // exported directory the volume lives in, e.g. "/"
	SubDir   string // the volume's directory relative to Share
	OnDelete string // delete | retain | archive
}

func (v volumeID) String() string {
	return strings.Join([]string{volumeIDVersion, v.Server, v.Share, v.SubDir, v.OnDelete}, idSep)
}

// Path is the volume's directory as an export path on the server, e.g.
// "/pvc-1"; the node mounts SERVER:Path.
func (v volumeID) Path() string { return path.Join("/", v.Share, v.SubDir) }

// adminPath is Path relative to the server root, as the admin API names
// volumes.
func (v volumeID) adminPath() string { return strings.TrimPrefix(v.Path(), "/") }

// parseVolumeID decodes a volume ID; errors say which part is wrong.
func parseVolumeID(s string) (volumeID, error) {
	f := strings.Split(s, idSep)
	if len(f) != 5 || f[0] != volumeIDVersion {
		return volumeID{}, fmt.Errorf("%w: volume id %q: want 1#SERVER#SHARE#SUBDIR#ONDELETE", errBadID, s)
	}
	v := volumeID{Server: f[1], Share: f[2], SubDir: f[3], OnDelete: f[4]}
	if v.Server == "" || !path.IsAbs(v.Share) || v.SubDir == "" || !cleanRel(v.SubDir) {
		return volumeID{}, fmt.Errorf("%w: volume id %q: bad server, share or subdirectory", errBadID, s)
	}
	switch v.OnDelete {
	case onDeleteDelete, onDeleteRetain, onDeleteArchive:
	default:
		return volumeID{}, fmt.Errorf("%w: volume id %q: bad onDelete %q", errBadID, s, v.OnDelete)
	}
	return v, nil
}

// cleanRel reports whether p is a clean relative path that stays below its
// base: no "..", no ".", no leading or doubled slash.
func cleanRel(p string) bool {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == "." {
		return false
	}
	for _, e := range strings.Split(p, "/") {
		if e == ".." || e == "." || e == "" {
			return false
		}
	}
	return true
}

// snapshotID names one snapshot on an export server.
type snapshotID struct {
	Server string
	ID     string // the export server's snapshot id
}

func (s snapshotID) String() string {
	return strings.Join([]string{snapshotIDVersion, s.Server, s.ID}, idSep)
}

func parseSnapshotID(s string) (snapshotID, error) {
	f := strings.Split(s, idSep)
	if len(f) != 3 || f[0] != snapshotIDVersion || f[1] == "" || f[2] == "" {
		return snapshotID{}, fmt.Errorf("%w: snapshot id %q: want s1#SERVER#ID", errBadID, s)
	}
	return snapshotID{Server: f[1], ID: f[2]}, nil
}

// serverSnapshotID derives the export server's snapshot id from the CSI
// snapshot name, so that CreateSnapshot is idempotent by name.
func serverSnapshotID(name string) string {
	h := sha256.Sum256([]byte(name))
	return "snap-" + hex.EncodeToString(h[:12])
}
