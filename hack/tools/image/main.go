// Command image builds cle's container image without a container runtime: a
// single layer, from scratch, holding the static binaries cle-controller (the
// entrypoint), kubectl-cle and candidate (examples/candidate, which
// manifests/examples runs) and a passwd entry for the non-root user they run
// as. It writes
// a tarball that `docker load`, `kind load image-archive` and
// `ctr images import` accept, and an OCI image layout that `crane push`
// (or `skopeo copy oci:...`) sends to a registry. hack/image.sh calls it.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user the image runs as: distroless's "nonroot".
const (
	uid = 65532
	gid = 65532
)

// binaries are the image's files under /, in the order they are written.
var binaries = []string{"cle-controller", "kubectl-cle", "candidate"}

// options are the builder's flags.
type options struct {
	binDir, tarPath, layoutDir, ref string
	version, revision, source       string
	created                         time.Time
	arch                            string
}

func main() {
	var o options
	var created string
	flag.StringVar(&o.binDir, "bin-dir", "", "Directory holding the static linux binaries cle-controller, kubectl-cle and candidate.")
	flag.StringVar(&o.tarPath, "tarball", "", "Write a docker-load tarball here (empty: none).")
	flag.StringVar(&o.layoutDir, "layout", "", "Write an OCI image layout here (empty: none).")
	flag.StringVar(&o.ref, "tag", "ghcr.io/cle-dev/cle:dev", "Image reference recorded in the tarball.")
	flag.StringVar(&o.version, "version", "dev", "Version recorded in the image's labels (the binaries carry their own).")
	flag.StringVar(&o.revision, "revision", "", "Source revision recorded in the image's labels.")
	flag.StringVar(&o.source, "source", "https://github.com/cle-dev/cle", "Source repository recorded in the image's labels.")
	flag.StringVar(&created, "created", "", "Creation time (RFC 3339) recorded in the image; empty: the Unix epoch, so that equal inputs give an equal digest.")
	flag.StringVar(&o.arch, "arch", "amd64", "Architecture of the binaries (GOARCH).")
	flag.Parse()
	if created != "" {
		t, err := time.Parse(time.RFC3339, created)
		if err != nil {
			fail(fmt.Errorf("--created: %w", err))
		}
		o.created = t
	}
	if o.binDir == "" || (o.tarPath == "" && o.layoutDir == "") {
		fail(errors.New("--bin-dir and one of --tarball or --layout are required"))
	}
	img, err := build(o)
	if err != nil {
		fail(err)
	}
	if err := write(img, o); err != nil {
		fail(err)
	}
	digest, err := img.Digest()
	if err != nil {
		fail(err)
	}
	fmt.Printf("image %s %s\n", o.ref, digest)
	for _, p := range []string{o.tarPath, o.layoutDir} {
		if p != "" {
			fmt.Printf("  %s\n", p)
		}
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "image: %v\n", err)
	os.Exit(1)
}

// build assembles the image.
func build(o options) (v1.Image, error) {
	layer, err := filesLayer(o.binDir)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, fmt.Errorf("add the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.arch
	cf.Created = v1.Time{Time: o.created}
	cf.Config.User = fmt.Sprintf("%d:%d", uid, gid)
	cf.Config.Entrypoint = []string{"/cle-controller"}
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "cle",
		"org.opencontainers.image.description": "cle-controller (the entrypoint), kubectl-cle and the example candidate: coordinated leader election for Kubernetes",
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.revision":    o.revision,
	}
	if !o.created.IsZero() {
		cf.Config.Labels["org.opencontainers.image.created"] = o.created.UTC().Format(time.RFC3339)
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set the image config: %w", err)
	}
	return mutate.ConfigMediaType(img, types.OCIConfigJSON), nil
}

// filesLayer is the image's only layer: /etc/passwd and /etc/group naming the
// non-root user, /tmp, and the binaries, owned by root and executable by all.
func filesLayer(binDir string) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	add := func(hdr *tar.Header, content []byte) error {
		hdr.ModTime, hdr.Format = epoch, tar.FormatPAX
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(content))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(content)
		return err
	}
	dirs := []*tar.Header{
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
	}
	for _, d := range dirs {
		if err := add(d, nil); err != nil {
			return nil, err
		}
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, gid)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", gid)
	if err := add(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}, []byte(passwd)); err != nil {
		return nil, err
	}
	if err := add(&tar.Header{Name: "etc/group", Typeflag: tar.TypeReg, Mode: 0o644}, []byte(group)); err != nil {
		return nil, err
	}
	for _, b := range binaries {
		content, err := os.ReadFile(filepath.Join(binDir, b))
		if err != nil {
			return nil, fmt.Errorf("read binary: %w", err)
		}
		if err := add(&tar.Header{Name: b, Typeflag: tar.TypeReg, Mode: 0o755}, content); err != nil {
			return nil, fmt.Errorf("add %s: %w", b, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// write saves the image as a tarball, an OCI layout, or both.
func write(img v1.Image, o options) error {
	if o.tarPath != "" {
		ref, err := name.ParseReference(o.ref)
		if err != nil {
			return fmt.Errorf("--tag: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(o.tarPath), 0o755); err != nil {
			return err
		}
		if err := tarball.WriteToFile(o.tarPath, ref, img); err != nil {
			return fmt.Errorf("write the tarball: %w", err)
		}
	}
	if o.layoutDir != "" {
		if err := os.RemoveAll(o.layoutDir); err != nil {
			return err
		}
		p, err := layout.Write(o.layoutDir, empty.Index)
		if err != nil {
			return fmt.Errorf("write the OCI layout: %w", err)
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.ref})); err != nil {
			return fmt.Errorf("write the OCI layout: %w", err)
		}
	}
	return nil
}
