// Command images builds container images from files on this host, without a
// registry or a container engine, and writes them as one docker-save archive
// (`ctr images import` and `docker load` read it).
//
//	go run . -o images.tar < spec.json
//
// spec.json is a JSON array, one object per image:
//
//	{"ref": "registry.k8s.io/pause:3.10.1",     // name:tag in the archive
//	 "entrypoint": ["/bin/sleep"], "cmd": ["2147483647"],
//	 "files": [{"src": "/usr/bin/busybox", "dst": "/bin/busybox"}],
//	 "links": {"/bin/sleep": "busybox"},         // symlinks: path -> target
//	 "dirs": ["/tmp"],                           // empty directories, mode 1777 for /tmp
//	 "env": ["PATH=/bin"], "user": "65532"}
//
// Each image has a single layer holding the files (mode and size of the
// source, owner root), the symlinks and the directories; the config names
// linux/GOARCH. The images are go-containerregistry v1.Image values written by
// tarball.MultiRefWriteToFile.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is a host file copied into the image.
type File struct {
	Src string `json:"src"`
	Dst string `json:"dst"`
}

// Spec describes one image.
type Spec struct {
	Ref        string            `json:"ref"`
	Entrypoint []string          `json:"entrypoint"`
	Cmd        []string          `json:"cmd"`
	Files      []File            `json:"files"`
	Links      map[string]string `json:"links"`
	Dirs       []string          `json:"dirs"`
	Env        []string          `json:"env"`
	User       string            `json:"user"`
}

// epoch is every entry's modification time, so that the same inputs give
// the same layer digest.
var epoch = time.Unix(0, 0).UTC()

// layerTar returns the single layer of s as an uncompressed tar stream.
func layerTar(s Spec) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	var mkdirs func(string, int64) error
	mkdirs = func(dir string, mode int64) error {
		dir = strings.TrimPrefix(path.Clean(dir), "/")
		if dir == "." || dir == "" || seen[dir] {
			return nil
		}
		if err := mkdirs(path.Dir(dir), 0o755); err != nil {
			return err
		}
		seen[dir] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: mode, ModTime: epoch})
	}
	for _, d := range s.Dirs {
		mode := int64(0o755)
		if path.Clean(d) == "/tmp" {
			mode = 0o1777
		}
		if err := mkdirs(d, mode); err != nil {
			return nil, err
		}
	}
	for _, f := range s.Files {
		st, err := os.Stat(f.Src)
		if err != nil {
			return nil, err
		}
		if err := mkdirs(path.Dir(f.Dst), 0o755); err != nil {
			return nil, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(path.Clean(f.Dst), "/"),
			Mode: int64(st.Mode().Perm()), Size: st.Size(), ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		in, err := os.Open(f.Src)
		if err != nil {
			return nil, err
		}
		_, err = io.CopyN(tw, in, st.Size())
		in.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Src, err)
		}
	}
	links := make([]string, 0, len(s.Links))
	for l := range s.Links {
		links = append(links, l)
	}
	sort.Strings(links)
	for _, l := range links {
		if err := mkdirs(path.Dir(l), 0o755); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(path.Clean(l), "/"),
			Linkname: s.Links[l], Mode: 0o777, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// build returns the image of s.
func build(s Spec) (v1.Image, error) {
	data, err := layerTar(s)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint, cf.Config.Cmd = s.Entrypoint, s.Cmd
	cf.Config.Env, cf.Config.User = s.Env, s.User
	if len(cf.Config.Env) == 0 {
		cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}
	}
	return mutate.ConfigFile(img, cf)
}

func main() {
	out := flag.String("o", "images.tar", "the docker-save archive to write")
	flag.Parse()
	var specs []Spec
	if err := json.NewDecoder(os.Stdin).Decode(&specs); err != nil {
		log.Fatalf("images: spec on stdin: %v", err)
	}
	refs := map[name.Reference]v1.Image{}
	for _, s := range specs {
		ref, err := name.NewTag(s.Ref)
		if err != nil {
			log.Fatalf("images: %q: %v", s.Ref, err)
		}
		img, err := build(s)
		if err != nil {
			log.Fatalf("images: %s: %v", s.Ref, err)
		}
		d, err := img.Digest()
		if err != nil {
			log.Fatalf("images: %s: %v", s.Ref, err)
		}
		fmt.Printf("images: %s %s\n", ref.Name(), d)
		refs[ref] = img
	}
	if err := tarball.MultiRefWriteToFile(*out, refs); err != nil {
		log.Fatalf("images: write %s: %v", *out, err)
	}
}
